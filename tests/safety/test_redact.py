"""Secrets out of every sink: known values exactly (also JSON-escaped) and key shapes."""

from __future__ import annotations

import json
import re

import pytest

from claw_batch.safety.redact import Redactor, redact_environment, secrets_from_env

# A key with every character JSON escapes, one it may escape (/), one outside the BMP.
AWKWARD = 'pa"ss\\wörd/😀-1234'


def test_secret_names_are_matched_by_their_parts() -> None:
    env = {
        "OPENAI_API_KEY": "sk-aaaaaaaaaaaaaaaaaaaaaaaa",
        "GITHUB_TOKEN": "ghtoken-123456789",
        "DB_PASSWORD": "hunter2hunter2",
        "GIT_AUTHOR_NAME": "Mara Example",
        "KEYBOARD_LAYOUT": "de-nodeadkeys",
        "PATH": "/usr/bin:/bin",
    }
    assert sorted(secrets_from_env(env)) == sorted(
        ["sk-aaaaaaaaaaaaaaaaaaaaaaaa", "ghtoken-123456789", "hunter2hunter2"]
    )


def spellings(secret: str) -> list[str]:
    """How text can hold `secret`: as itself, and through JSON as Python, other encoders
    and transcripts (JSON of JSON) write it."""
    once = [json.dumps(secret, ensure_ascii=a)[1:-1] for a in (False, True)]
    twice = [json.dumps(s, ensure_ascii=a)[1:-1] for s in once for a in (False, True)]
    thrice = [json.dumps(s, ensure_ascii=a)[1:-1] for s in twice for a in (False, True)]
    other_encoders = [
        json.dumps(secret)[1:-1].replace("/", "\\/"),  # PHP, some Java
        re.sub(r"\\u[0-9a-f]{4}", lambda m: m[0].upper().replace("\\U", "\\u"), once[1]),
    ]
    return [secret, *once, *twice, *thrice, *other_encoders]


@pytest.mark.parametrize("form", spellings(AWKWARD))
def test_known_values_are_redacted_however_json_spells_them(form: str) -> None:
    assert Redactor([AWKWARD])(f"before {form} after") == "before [REDACTED] after"


def test_redacted_json_stays_json() -> None:
    """A transcript line is redacted as a whole: what replaces the key is inside its string."""
    redact = Redactor([AWKWARD, "key-ending-in\\"])
    arguments = json.dumps({"content": f"{AWKWARD} and key-ending-in\\", "n": 1})
    line = json.dumps({"type": "assistant", "arguments": arguments}, ensure_ascii=False)
    event = json.loads(redact(line))
    assert json.loads(event["arguments"]) == {"content": "[REDACTED] and [REDACTED]", "n": 1}


def test_short_values_are_not_secrets() -> None:
    assert Redactor(["short"])("short stays") == "short stays"


KEY_SHAPES = [
    "sk-proj-abcdefghijklmnop1234",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789",
    *(f"gh{c}_{'a1' * 18}" for c in "pousr"),
    "github_pat_" + "a1" * 20,
    "glpat-abcdefghij0123456789",
    "AKIAABCDEFGHIJKLMNOP",
    "ASIAABCDEFGHIJKLMNOP",
    "xoxb-1234567890-abcdef",
    "xapp-1-A0123456789-abcdef",
    "gsk_" + "a1" * 12,
    "AIza" + "B" * 35,
    "sk_live_" + "a1" * 12,
    "rk_test_" + "a1" * 12,
    "hf_" + "a1" * 17,
    "npm_" + "a1" * 18,
    "pypi-" + "AgEIcHlwaS5vcmc" * 4,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]


@pytest.mark.parametrize("key", KEY_SHAPES)
def test_every_key_shape_is_redacted(key: str) -> None:
    redact = Redactor()
    assert redact(f"the key {key}, again: {key}.") == "the key [REDACTED], again: [REDACTED]."
    assert redact(json.dumps({"k": key})) == '{"k": "[REDACTED]"}'


def test_credentials_in_headers_urls_and_pem_blocks() -> None:
    redact = Redactor()
    assert redact("Authorization: Bearer abcdefghijklmnopqrstuvwxyz") == (
        "Authorization: Bearer [REDACTED]"
    )
    assert redact("Authorization: Basic dXNlcjpodW50ZXIyaHVudGVyMg==") == (
        "Authorization: Basic [REDACTED]"
    )
    assert redact("clone https://mara:hunter2hunter2@git.example.org/x.git") == (
        "clone https://mara:[REDACTED]@git.example.org/x.git"
    )
    pem = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq+x/y=\nabc\n"
        "-----END RSA PRIVATE KEY-----"
    )
    assert redact(f"key:\n{pem}\nthat was it") == "key:\n[REDACTED]\nthat was it"
    line = json.dumps({"content": f"{pem}\nthat was it"})
    assert json.loads(redact(line)) == {"content": "[REDACTED]\nthat was it"}
    cut = json.dumps({"content": pem[:60]})  # a tool result cut in the middle of the key
    assert json.loads(redact(cut)) == {"content": "[REDACTED]"}


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("redis://:s3cr3t@127.0.0.1:6379/0", "redis://:[REDACTED]@127.0.0.1:6379/0"),
        ("https://mara:s3cr3t@passw0rd@h.example.org/x", "https://mara:[REDACTED]@h.example.org/x"),
        ("https://mara:pa:ss@h.example.org", "https://mara:[REDACTED]@h.example.org"),
        ("'postgres://u:p@@ss@db:5432?ssl=1'", "'postgres://u:[REDACTED]@db:5432?ssl=1'"),
    ],
    ids=["no-user", "at-in-password", "colon-in-password", "quoted-with-port"],
)
def test_a_url_password_goes_whole_with_or_without_a_user(url: str, redacted: str) -> None:
    assert Redactor()(url) == redacted


# Credentials that files hold under a name that says so, each as read and as redacted.
NAMED = [
    # what actions/checkout writes into .git/config, and the lower-case forms of the header
    (
        '[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic '
        "eC1hY2Nlc3MtdG9rZW46Z2hzXzE2QzdlNDJGMjkyYzY5MTJFNzcx\n",
        '[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic [REDACTED]\n',
    ),
    ("authorization: basic dXNlcjpodW50ZXIy", "authorization: basic [REDACTED]"),
    ("authorization: bearer abc123.def456", "authorization: bearer [REDACTED]"),
    ("curl -H 'Authorization: token 9f8e7d6c5b'", "curl -H 'Authorization: token [REDACTED]'"),
    ('{"authorization": "Bearer abc123def456"}', '{"authorization": "Bearer [REDACTED]"}'),
    # .env files, shells, compose files
    (
        "DB_HOST=db\nDB_PASSWORD=hunter2\nSECRET=s3cr3t\nTOKEN=t0k3n-abc\nAPI_KEY=k-123\n",
        "DB_HOST=db\nDB_PASSWORD=[REDACTED]\nSECRET=[REDACTED]\nTOKEN=[REDACTED]\n"
        "API_KEY=[REDACTED]\n",
    ),
    ("export GITHUB_TOKEN=changeme # set later", "export GITHUB_TOKEN=[REDACTED] # set later"),
    ('PASSWORD="correct horse battery"', 'PASSWORD="[REDACTED]"'),
    ("SECRET='it is me'", "SECRET='[REDACTED]'"),
    (
        "environment:\n  - POSTGRES_PASSWORD=example",
        "environment:\n  - POSTGRES_PASSWORD=[REDACTED]",
    ),
    # YAML and JSON
    ("db:\n  password: hunter2\n  user: mara", "db:\n  password: [REDACTED]\n  user: mara"),
    ('api_key: "abc def"', 'api_key: "[REDACTED]"'),
    ("- client_secret: x-9Yz", "- client_secret: [REDACTED]"),
    ("npmAuthToken: npm-0a1b2c", "npmAuthToken: [REDACTED]"),
    (
        '{"user": "mara", "password": "hunter2", "access_token": "ya29.a0Af"}',
        '{"user": "mara", "password": "[REDACTED]", "access_token": "[REDACTED]"}',
    ),
]


@pytest.mark.parametrize(("text", "redacted"), NAMED)
def test_credentials_named_in_files_are_redacted(text: str, redacted: str) -> None:
    """Read from a `.git/config`, a `.env` file, a YAML or JSON file, and so in a tool
    result: as the file says it, and inside a transcript line (JSON of the text) and a tool
    call's arguments there (JSON of JSON)."""
    redact = Redactor()
    assert redact(text) == redacted
    line = json.dumps({"content": text}, ensure_ascii=False)
    assert json.loads(redact(line)) == {"content": redacted}
    call = json.dumps({"arguments": json.dumps({"content": text})})
    assert json.loads(json.loads(redact(call))["arguments"]) == {"content": redacted}


NORMAL_TEXT = [
    "no key here, though: sk-short and sk-learn-compatible-estimators",
    "risk-assessment-for-the-quarterly-report and task-0123456789abcdefghij",
    "commit 3b7928f0c1d2e3f4a5b6c7d8e9f00112233445566, uuid 123e4567-e89b-12d3-a456-4266141740",
    "see https://example.org/docs?q=1 or mail mara@example.org; ssh://git@github.com/x/y",
    "http://127.0.0.1:8080/a@b and https://example.org/@mara (a port, an @ in the path)",
    "def ghp_helper(): return AKIA_PREFIX + 'xoxo' + 'eyJ' + hf_model",
    "Bearer tokens go in a header: `Authorization: Bearer <token>`",
    '{"path": "workspace/reports/2026-11-22.md", "content": "# Report\\n\\n- ok"}',
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8\n-----END PUBLIC KEY-----",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
    # names that say secret, without one: prose, empty values, references, numbers, code
    "Fill in the password field; the token budget is the key: value pairs below.",
    'TOKEN= (empty until the first deploy), PASSWORD=, SECRET=""',
    "GITHUB_TOKEN=${{ secrets.GITHUB_TOKEN }}\nAPI_KEY=$API_KEY\nPASSWORD_MIN_LENGTH=12",
    "SKIP_AUTH=true\nTOKEN_TTL=3600\ntoken_type: bearer\npassword_hash: none",
    "def login(token=token, password=password):\n    api_key: Optional[str] = None",
    "class Settings:\n    password: str\n    token: SecretStr\n    API_KEY = os.environ['X']",
    "the authorization: basic idea is simple; Authorization: Bearer <token>",
    "password: # set in the vault\nsecret: |\n",
]


@pytest.mark.parametrize("text", NORMAL_TEXT)
def test_normal_text_is_left_alone(text: str) -> None:
    assert Redactor(["hunter2hunter2"])(text) == text


def test_last_resort_messages_know_every_declared_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash log or the top-level error line knows no clawfile: it redacts the secrets of
    the environment and every value a Redactor was made with (a provider's key whose
    variable's name says nothing)."""
    monkeypatch.setenv("MY_LLM", "local-model-credential-77")
    monkeypatch.setenv("DB_PASSWORD", "hunter2hunter2")
    text = "failed: local-model-credential-77 / hunter2hunter2"
    assert redact_environment(text) == "failed: local-model-credential-77 / [REDACTED]"
    Redactor(["local-model-credential-77"])
    assert redact_environment(text) == "failed: [REDACTED] / [REDACTED]"

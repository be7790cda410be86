"""Keep secrets out of every sink: known secret values exactly, common key shapes, and the
values that files name as credentials (an Authorization header, `.env`, YAML, JSON).

A known value is found as itself and as JSON spells it, also JSON inside JSON (a tool call's
arguments are JSON, and a transcript line is JSON again: up to MAX_DEPTH levels), written with
or without `ensure_ascii` at each level, with escaped slashes or upper-case `\\u` digits.
Redaction is a safety net for keys that reach text by accident; it cannot stop a model that has
a key from spelling it otherwise (base64, reversed). What stops that is that the model never
gets one: scrubbed environments, and `/proc` refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "[REDACTED]"
MIN_SECRET_LEN = 8  # shorter values would redact ordinary words
# A variable holds a secret when a part of its name (between underscores) says so:
# OPENAI_API_KEY, GITHUB_TOKEN, DB_PASSWORD — but not GIT_AUTHOR_NAME or KEYBOARD_LAYOUT.
SECRET_NAME = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)(?:_|$)",
    re.IGNORECASE,
)
# Characters no JSON encoder escapes (json, Go's HTML-safe one, PHP's escaped slashes...):
# a run of them is a substring of every spelling of a secret, which makes a cheap test.
PLAIN = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$%()*+,-.:;=?@[]^_`{|}~"
)
MAX_DEPTH = 3  # JSON in JSON in JSON: a transcript line of a tool call whose argument is JSON
MIN_NEEDLE = 4  # a secret with no plain run this long is looked for in every text
# Key shapes, each with the text it must contain: a substring search per marker is far
# cheaper than a pattern, and most text has none of them, so is left alone without a regex.
BODY = r"[A-Za-z0-9_\-]"
KEY_SHAPES: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (markers, re.compile(pattern))
    for markers, pattern in (
        (("sk-",), rf"\bsk-(?={BODY}*\d){BODY}{{20,}}"),  # OpenAI, Anthropic, DeepSeek...
        (tuple(f"gh{c}_" for c in "pousr"), r"\bgh[pousr]_[A-Za-z0-9]{30,}"),  # GitHub
        (("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{30,}"),
        (("glpat-",), rf"\bglpat-{BODY}{{20,}}"),  # GitLab
        (("AKIA", "ASIA"), r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
        (("xox",), r"\bxox[abprse]-[A-Za-z0-9\-]{10,}"),  # Slack
        (("xapp-",), r"\bxapp-\d-[A-Za-z0-9\-]{10,}"),
        (("gsk_",), r"\bgsk_[A-Za-z0-9]{20,}"),  # Groq
        (("AIza",), rf"\bAIza{BODY}{{35}}"),  # Google API keys
        (("k_live_", "k_test_"), r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
        (("hf_",), r"\bhf_[A-Za-z0-9]{30,}"),  # Hugging Face
        (("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b"),
        (("pypi-",), rf"\bpypi-{BODY}{{50,}}"),
        # A JWT: header and payload are base64 of JSON objects, so both start with eyJ.
        (("eyJ",), rf"\beyJ{BODY}{{8,}}\.eyJ{BODY}{{8,}}\.{BODY}{{8,}}"),
        (("Bearer ",), r"(?<=Bearer )[A-Za-z0-9._~+/\-]{16,}=*"),
        (("Basic ",), r"(?<=Basic )[A-Za-z0-9+/]{16,}=*"),
        # PEM private keys, also with their newlines JSON-escaped; never past a quote.
        (
            ("PRIVATE KEY-----",),
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:(?!-----END)[A-Za-z0-9+/=:,\-\s\\])*"
            r"(?:-----END [A-Z ]*PRIVATE KEY-----)?",
        ),
    )
)
# Every marker at once: most text holds none, and one loop over them is what it costs.
MARKERS = tuple(marker for markers, _ in KEY_SHAPES for marker in markers)
# A password in a URL (scheme://user:password@host): the user name stays. The user may be
# empty (`redis://:pw@host`), and the password runs to the last `@` before the host, so an
# unencoded `@` or `:` in it goes too; `http://host:8080/a@b` (a port, no password) stays.
URL_PASSWORD = re.compile(r"(://[^\s/:@\"'\\]*:)[^\s/\"'\\]+(?=@[^\s/@\"'\\]+(?:[/\s\"'\\:]|$))")

# Credentials a file holds under a name that says so — a `.git/config`, a `.env` file, YAML
# or JSON — found by that name, whatever their shape; the name stays, the value goes. Each
# pattern also matches the text inside a JSON string (a transcript line), where a quote is
# `\"` and a line starts after `\n`; a value never takes in a quote or a backslash, so
# redacted JSON stays JSON.
_QUOTE = r"""\\*["']"""
_VALUE = r"""(?:\\*(?P<q>["'])(?P<quoted>[^"'\\\r\n]+)|(?P<bare>[^\s"'\\#][^\s"'\\]*))"""
# Any case: actions/checkout writes `extraheader = AUTHORIZATION: basic <base64>`.
AUTH_HEADER = re.compile(
    rf"(?i)(\bauthorization(?:{_QUOTE})?[ \t]*[:=][ \t]*(?:{_QUOTE})?(?:basic|bearer|token)[ \t]+)"
    r"[A-Za-z0-9._~+/\-]{8,}=*"
)
# .env files, shells, Dockerfiles, compose files: NAME=value with an upper-case name (the
# convention that keeps `f(token=token)` in code out of it), `export ` or `- ` before it.
ENV_ASSIGNMENT = re.compile(rf"(?:(?<=\\[nrt])|(?<![\w$]))(?P<name>[A-Z][A-Z0-9_]*)={_VALUE}")
# YAML `name: value` at a line's start (also `- name: value`; in JSON, a string's start is
# a line's), and JSON `"name": "value"`.
YAML_ENTRY = re.compile(
    r"""(?m)(?:^|(?<=\\n)|(?<="))[ \t]*(?:-[ \t]+)?(?P<name>[A-Za-z_][\w.-]*)[ \t]*:[ \t]+"""
    + _VALUE
)
JSON_MEMBER = re.compile(
    rf"(?P<nq>{_QUOTE})(?P<name>[A-Za-z_][\w.-]*)(?P=nq)[ \t]*:[ \t]*"
    r"""\\*(?P<q>["'])(?P<quoted>[^"'\\\r\n]+)"""
)
# In YAML and JSON, where names are any case and code looks alike (`token_type: bearer`,
# `password_hash`), only a name that ends in a secret's word: api_key, clientSecret, token.
ENDS_SECRET = re.compile(
    r"(?:(?:^|[_.-])(?i:passw(?:or)?d|secret|token|api_?key|access_?key|secret_?key"
    r"|private_?key|credentials?)|[a-z0-9](?:Passw(?:or)?d|Secret|Token|ApiKey|AccessKey"
    r"|SecretKey|PrivateKey|Credentials?))$"
)
# Values that are no secret: a reference to one ($X, ${X}, ${{ secrets.X }}), a number, a
# switch, punctuation. And an unquoted YAML value of letters alone reads as a type
# (`password: str`).
NOT_SECRET = re.compile(r"\$.*|\d+|[\W_]*|(?i:true|false|yes|no|on|off|null|none)")
TYPE_LIKE = re.compile(r"[A-Za-z_.\[\](),;|]+")
# A cheap test first, as for KEY_SHAPES: a word that each name above contains, in any case.
NAME_WORDS = ("pass", "secret", "token", "key", "credential", "auth")

# Every secret a Redactor was made with, for `redact_environment` (a crash log, the
# last-resort error message), which knows nothing of the clawfile's key variables.
_declared: set[str] = set()


def secrets_from_env(environ: Mapping[str, str], names: Iterable[str] = ()) -> list[str]:
    """Values of the named variables and of every variable whose name looks secret."""
    wanted = set(names)
    return [
        value
        for name, value in environ.items()
        if (name in wanted or SECRET_NAME.search(name)) and len(value) >= MIN_SECRET_LEN
    ]


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        known = sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
        _declared.update(known)
        forms = sorted({f for s in known for f in _spellings(s)}, key=len, reverse=True)
        self._exact = re.compile("|".join(map(re.escape, forms))) if forms else None
        needles = [_needle(s) for s in known]
        self._always = any(n is None for n in needles)
        self._needles = tuple({n for n in needles if n is not None})

    def __call__(self, text: str) -> str:
        if self._exact is not None and (self._always or _holds(text, self._needles)):
            text = self._exact.sub(MASK, text)
        if _holds(text, MARKERS):
            for markers, pattern in KEY_SHAPES:
                if _holds(text, markers):
                    text = pattern.sub(MASK, text)
        if "://" in text and "@" in text:
            text = URL_PASSWORD.sub(rf"\g<1>{MASK}", text)
        return _named(text)

    def deep(self, value: Any) -> Any:
        """`value` with every string in it redacted (dict keys are names, kept as they are)."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: self.deep(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.deep(v) for v in value]
        return value


def _holds(text: str, needles: tuple[str, ...]) -> bool:
    """Whether `text` holds one of `needles`: a plain loop, as this runs on every text a job
    writes (any() over a generator costs several times more)."""
    for needle in needles:  # noqa: SIM110 (see above)
        if needle in text:
            return True
    return False


def redact_environment(text: str) -> str:
    """For messages printed outside a run: the secrets of this process's environment and
    those any Redactor was made with."""
    import os

    return Redactor([*secrets_from_env(os.environ), *_declared])(text)


def _named(text: str) -> str:
    """`text` without the values of the credentials it names (AUTH_HEADER, ENV_ASSIGNMENT,
    YAML_ENTRY, JSON_MEMBER)."""
    if ":" not in text and "=" not in text:
        return text
    lower = text.lower()
    if not _holds(lower, NAME_WORDS):
        return text
    if "=" in text:
        text = ENV_ASSIGNMENT.sub(_env_value, text)
    if "uthorization" in lower:
        text = AUTH_HEADER.sub(rf"\g<1>{MASK}", text)
    if ":" in text:
        text = YAML_ENTRY.sub(_yaml_value, text)
        text = JSON_MEMBER.sub(_yaml_value, text)
    return text


def _env_value(m: re.Match[str]) -> str:
    return _masked(m) if SECRET_NAME.search(m["name"]) else m[0]


def _yaml_value(m: re.Match[str]) -> str:
    if not ENDS_SECRET.search(m["name"]):
        return m[0]
    if m["quoted"] is None and TYPE_LIKE.fullmatch(m["bare"]):
        return m[0]
    return _masked(m)


def _masked(m: re.Match[str]) -> str:
    """The match with its value (group quoted or bare) masked, unless it is no secret."""
    group = "quoted" if m["quoted"] is not None else "bare"
    if NOT_SECRET.fullmatch(m[group].strip()):
        return m[0]
    start, end = m.start(group) - m.start(), m.end(group) - m.start()
    return m[0][:start] + MASK + m[0][end:]


def _spellings(secret: str) -> set[str]:
    """`secret` as itself and JSON-escaped (see the module's docstring)."""
    forms = {secret}
    level = {secret}
    for _ in range(MAX_DEPTH):
        level = {json.dumps(s, ensure_ascii=a)[1:-1] for s in level for a in (False, True)}
        forms |= level
    once = json.dumps(secret)[1:-1]
    forms.add(once.replace("/", "\\/"))
    forms.add(re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m[1].upper(), once))
    return forms


def _needle(secret: str) -> str | None:
    """The secret's longest run of characters every spelling keeps as they are."""
    runs = re.findall("[" + re.escape("".join(sorted(PLAIN))) + "]+", secret)
    longest = max(runs, key=len, default="")
    return longest if len(longest) >= MIN_NEEDLE else None

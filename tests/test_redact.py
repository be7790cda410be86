"""Secrets out of every sink: known values exactly (also JSON-escaped) and key shapes."""

from __future__ import annotations

from claw_batch.redact import Redactor, secrets_from_env


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


def test_exact_values_json_escaped_forms_and_shapes() -> None:
    redact = Redactor(['pa"ss\\word-1234'])
    assert redact('{"v": "pa\\"ss\\\\word-1234"}') == '{"v": "[REDACTED]"}'
    assert redact('raw pa"ss\\word-1234 here') == "raw [REDACTED] here"
    assert redact("key sk-proj-abcdefghijklmnop1234 and ghp_" + "a" * 36) == (
        "key [REDACTED] and [REDACTED]"
    )
    assert redact("Authorization: Bearer abcdefghijklmnopqrstuvwxyz") == (
        "Authorization: Bearer [REDACTED]"
    )
    assert Redactor(["short"])("short stays") == "short stays"


def test_every_key_shape_is_redacted() -> None:
    # Each shape is looked for only when its marker occurs (KEY_MARKERS): one sample each.
    samples = [
        "sk-proj-abcdefghijklmnop1234",
        *(f"gh{c}_{'a' * 36}" for c in "pousr"),
        "github_pat_" + "a" * 40,
        "AKIAABCDEFGHIJKLMNOP",
        "xoxb-1234567890-abcdef",
        "gsk_" + "a" * 24,
    ]
    redact = Redactor()
    for sample in samples:
        assert redact(f"the key {sample}, again: {sample}.") == (
            "the key [REDACTED], again: [REDACTED]."
        ), sample
    assert redact("Bearer abcdefghijklmnopqrstuvwxyz") == "Bearer [REDACTED]"
    assert redact("no key here, though: sk-short") == "no key here, though: sk-short"

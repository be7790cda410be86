"""Keep secrets out of every sink: known secret values exactly, and common key shapes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

MASK = "[REDACTED]"
MIN_SECRET_LEN = 8  # shorter values would redact ordinary words
# A variable holds a secret when a part of its name (between underscores) says so:
# OPENAI_API_KEY, GITHUB_TOKEN, DB_PASSWORD — but not GIT_AUTHOR_NAME or KEYBOARD_LAYOUT.
SECRET_NAME = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)(?:_|$)",
    re.IGNORECASE,
)
KEY_PATTERNS = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{16,}"  # OpenAI and compatible
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|\bgithub_pat_[A-Za-z0-9_]{30,}"
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|\bgsk_[A-Za-z0-9]{20,}"  # Groq
    r"|(?<=Bearer )[A-Za-z0-9._\-]{16,}"
)
# Text each KEY_PATTERNS alternative must contain. The pattern costs ~0.2 µs a character (its
# look-behind is tried at every position), a few substring searches far less: most text has
# none of these and is left alone without running it.
KEY_MARKERS = (
    "sk-",
    *(f"gh{c}_" for c in "pousr"),
    "github_pat_",
    "AKIA",
    "xox",
    "gsk_",
    "Bearer ",
)


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
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET_LEN:
                forms.add(secret)
                forms.add(json.dumps(secret)[1:-1])  # as it appears inside JSON text
        self._forms = tuple(sorted(forms, key=len, reverse=True))
        self._exact = re.compile("|".join(map(re.escape, self._forms))) if forms else None

    def __call__(self, text: str) -> str:
        if self._exact is not None and any(form in text for form in self._forms):
            text = self._exact.sub(MASK, text)
        if any(marker in text for marker in KEY_MARKERS):
            text = KEY_PATTERNS.sub(MASK, text)
        return text


def redact_environment(text: str) -> str:
    """For messages printed outside a run: the secrets of this process's environment."""
    import os

    return Redactor(secrets_from_env(os.environ))(text)

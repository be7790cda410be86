"""Unexpected errors: the traceback goes to a file, not over the user's terminal."""

from __future__ import annotations

import tempfile
import time
import traceback
from pathlib import Path

from claw_batch.redact import Redactor, secrets_from_env


def save_traceback(error: BaseException) -> Path:
    import os

    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    text = Redactor(secrets_from_env(os.environ))(text)
    directory = Path(tempfile.gettempdir())
    path = directory / f"claw-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    path.write_text(text, encoding="utf-8")
    return path

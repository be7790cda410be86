"""Unexpected errors: the traceback goes to a file, not over the user's terminal."""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path

from claw_batch.safety.redact import redact_environment


def save_traceback(error: BaseException) -> Path:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    fd, name = tempfile.mkstemp(prefix=f"claw-crash-{stamp}-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(redact_environment(text))
    return Path(name)

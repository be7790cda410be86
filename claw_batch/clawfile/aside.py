"""A clawfile validated in a forked child while the parent gets on with its start-up.

Validating imports pydantic, YAML and Jinja2 and builds the clawfile's models: ~0.13 s of a
core here, spent before a project's first run (and the first after each edit of what
validation reads) can do anything else. With a second core, a child forked before any thread
exists validates while the parent imports what its command needs; the parent takes the
validated document from the child, as it would from the cache (claw_batch.clawfile.cache).
When the child hands none over — an invalid clawfile, a child that died — the parent
validates itself, so that what it says and how it exits are exactly as without a child.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from claw_batch.cores import usable_cores

# The document and, per task, the template variables it reads: what the cache keeps.
Validated = tuple[dict[str, Any], dict[str, frozenset[str]]]


def validated_aside(path: Path, root: Path, meanwhile: Callable[[], object]) -> Validated | None:
    """The clawfile at `path` validated by a child while this process runs `meanwhile`; None
    when it must be validated here (one core, a thread running, no fork, or no document)."""
    if usable_cores() < 2 or threading.active_count() > 1 or not hasattr(os, "fork"):
        return None
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(path, root, readable, writable)
    os.close(writable)
    try:
        with os.fdopen(readable, "rb") as pipe:
            meanwhile()
            data = pipe.read()  # to the end: the child has written all it will
        _, status = os.waitpid(pid, 0)
        pid = 0
    finally:
        if pid:  # Ctrl-C, or `meanwhile` raised: the child goes too
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if status != 0 or not data:
        return None
    saved = json.loads(data)
    return saved["document"], {name: frozenset(v) for name, v in saved["variables"].items()}


def _child(path: Path, root: Path, readable: int, writable: int) -> None:
    """Validate, hand the document over, exit; never anything on the terminal, never an exit
    handler of the parent's, and signals left to the parent, which kills the child."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        os.close(readable)
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        from claw_batch.clawfile.validate import validate

        validated = validate(path, root)
        variables = {name: sorted(names) for name, names in validated.variables.items()}
        data = json.dumps({"document": validated.document, "variables": variables})
        with os.fdopen(writable, "wb") as pipe:
            pipe.write(data.encode())
    except BaseException:  # the parent validates, and says why
        os._exit(1)
    os._exit(0)

"""A command target: the program run as given (no shell), the payload as JSON on its stdin,
from a scrubbed environment (no provider key, no SMTP password, no webhook URL), in a process
group of its own that is killed whole when it ends or its time is up. Outside the model's
sandbox: the clawfile's author wrote it, not a job. So it runs in a fresh empty folder, not
the project (where a job may have planted a `json.py` that `python -c` would import, or a
program that a "." in PATH would find), with `PYTHONSAFEPATH=1` (no script's folder on its
import path) and `CLAW_PROJECT` saying where the project is; an argument that is a relative
path to a project file is given as that file's absolute path. The files it names are kept
from every job (claw_batch.safety.control.notify_code)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from claw_batch.notify.attempt import Miss, seconds
from claw_batch.safety.childenv import scrubbed_env

STDERR_BYTES = 4096  # read of what it wrote on stderr
SHOWN_CHARS = 200  # of its first line, in the error
POLL_SECONDS = 0.05  # where no pidfd can be waited on


def run(
    argv: Sequence[str],
    payload: bytes,
    *,
    timeout: float,
    environ: Mapping[str, str],
    project: Path | None,
) -> Miss | None:
    """Run `argv` with `payload` on stdin; None when it exits 0. `project`: the project's
    root, where its relative paths are from."""
    name = f"command {argv[0]}"
    env = scrubbed_env(environ=environ)
    env["PYTHONSAFEPATH"] = "1"
    if project is not None:
        env["CLAW_PROJECT"] = str(project)
    # Files, not pipes: a program that never reads its stdin, or a child left holding
    # stderr open, cannot block the wait.
    with (
        tempfile.TemporaryDirectory(prefix="claw-notify-", ignore_cleanup_errors=True) as cwd,
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stderr,
    ):
        stdin.write(payload)
        stdin.seek(0)
        try:
            proc = subprocess.Popen(
                resolved(argv, project),
                stdin=stdin,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as e:
            return _unstarted(name, argv[0], e)
        try:
            ended = _wait(proc, timeout)
        finally:
            # The group, children included, while the leader is unreaped: its id cannot be
            # another group's yet.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if not ended:
            return Miss(f"{name}: timed out after {seconds(timeout)} (killed)")
        if proc.returncode == 0:
            return None
        stderr.seek(0)
        return Miss(f"{name}: {_how(proc.returncode)}{_first_line(stderr.read(STDERR_BYTES))}")


def resolved(argv: Sequence[str], project: Path | None) -> list[str]:
    """`argv` with each relative path to one of the project's files (`scripts/notify.py`,
    `notify.py`) or folders (`bin/x`: one with a `/`) made absolute, since the command runs
    elsewhere. A program's bare name (`notify-send`) is looked up on PATH; an option and an
    absolute path are left as they are."""
    if project is None:
        return list(argv)
    found = []
    for index, arg in enumerate(argv):
        path = project / arg
        bare = "/" not in arg
        local = (
            bool(arg)
            and not arg.startswith(("-", "/"))
            and "\0" not in arg
            and not (index == 0 and bare)
            and (path.is_file() if bare else os.path.lexists(path))
        )
        found.append(os.path.normpath(path) if local else arg)
    return found


def _unstarted(name: str, program: str, error: OSError) -> Miss:
    if isinstance(error, FileNotFoundError) and error.filename in (program, None):
        return Miss(f"{name}: not found (not a file, nor a program on PATH)", final=True)
    if isinstance(error, PermissionError):
        return Miss(f"{name}: not executable", final=True)
    return Miss(f"{name}: cannot start ({error.strerror or error})", final=True)


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether it exited within `timeout`; it is left unreaped (see `run`)."""
    end = time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while not _exited(proc):
            left = end - time.monotonic()
            if left <= 0:
                return False
            if pidfd is not None:
                select.select([pidfd], [], [], left)  # readable once it has exited
            else:
                time.sleep(min(left, POLL_SECONDS))
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _how(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit {code}"


def _first_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines()]
    line = next((line for line in lines if line), "")
    shown = "".join(ch for ch in line if ch.isprintable())
    if len(shown) > SHOWN_CHARS:
        shown = shown[:SHOWN_CHARS] + "…"
    return f": {shown}" if shown else ""

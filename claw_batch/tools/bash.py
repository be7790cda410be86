"""bash: one command in the project root, in its own process group, with a hard time limit.

The whole group is killed when the command times out and also when it ends, so background
children can neither outlive the call nor hang it by holding the output pipe open.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import Field

from claw_batch import cancel
from claw_batch.errors import ToolError
from claw_batch.tools.base import ToolContext

# With pattern permissions a command must be one simple command: these would chain, pipe,
# substitute or redirect their way past the pattern.
CONTROL_OPERATORS = (";", "&", "|", "`", "$(", ">", "<", "\n")
MAX_OUTPUT_BYTES = 30_000
MAX_OUTPUT_LINES = 2000
POLL_SECONDS = 0.05
DRAIN_SECONDS = 0.5  # after the kill, how long to wait for output still in flight


def bash(
    ctx: ToolContext,
    *,
    command: str,
    timeout: Annotated[int, Field(ge=1, le=600, description="seconds")] = 120,
) -> str:
    """Run `bash -c command` in the project root; returns the exit code and output tail."""
    check_allowed(ctx.bash_allow, command)
    limit = min(float(timeout), ctx.deadline - time.monotonic())
    if limit <= 0:
        raise ToolError("the job's time limit has been reached; no time left to run commands")
    argv = ["bash", "-c", command]
    if ctx.sandbox is not None:
        argv = ctx.sandbox.wrap(argv, cwd=ctx.root)
    code, output, cut = run(argv, cwd=ctx.root, env=ctx.env, timeout=limit)
    if code is None:
        shown = f"{limit:.0f}" if limit >= 1 else f"{limit:.1f}"
        head = f"timed out after {shown} s (the command and its children were killed)"
        if limit < timeout:
            head += "; the job's time limit is nearly reached"
    elif code < 0:
        head = f"killed by signal {signal.Signals(-code).name}"
    else:
        head = f"exit code {code}"
    note = f"[... {cut} bytes cut ...]\n" if cut else ""
    return f"{head}\n{note}{output or '(no output)'}"


def check_allowed(allow: tuple[str, ...] | bool, command: str) -> None:
    if allow is True:
        return
    if not allow:
        raise ToolError("bash is not enabled for this task; use the other tools")
    allowed = ", ".join(allow)
    operator = next((op for op in CONTROL_OPERATORS if op in command), None)
    if operator is not None:
        raise ToolError(
            f"bash command refused: {operator!r} is not allowed; run a single command "
            f"without shell operators that matches one of: {allowed}"
        )
    if not any(fnmatch.fnmatchcase(command.strip(), p) for p in allow):
        raise ToolError(f"bash command refused: it must match one of: {allowed}")


def run(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float
) -> tuple[int | None, str, int]:
    """(exit code or None on timeout, the output's tail, how many bytes were cut before it)."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        raise ToolError(f"cannot start {argv[0]}: {e.strerror or e}") from None
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    out = bytearray()
    total = 0
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            exited, total = _pump(proc, sel, fd, out, time.monotonic() + timeout)
    finally:
        _kill_group(proc.pid)
        proc.wait()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            total = _drain(sel, fd, out, total)
        proc.stdout.close()
    text, cut = _tail(bytes(out), total)
    return (proc.returncode if exited else None), text, cut


def _pump(
    proc: subprocess.Popen[bytes],
    sel: selectors.BaseSelector,
    fd: int,
    out: bytearray,
    deadline: float,
) -> tuple[bool, int]:
    """Collect output until the command exits (True) or the deadline passes (False)."""
    total, eof = 0, False
    while not _exited(proc):
        cancel.check()  # the run was cancelled: the caller's finally kills the group
        left = deadline - time.monotonic()
        if left <= 0:
            return False, total
        if eof:  # the command closed its output but still runs
            time.sleep(min(left, POLL_SECONDS))
        elif sel.select(min(left, POLL_SECONDS)):
            chunk = os.read(fd, 65536)
            eof = not chunk
            total = _keep(out, chunk, total)
    return True, total


def _drain(sel: selectors.BaseSelector, fd: int, out: bytearray, total: int) -> int:
    end = time.monotonic() + DRAIN_SECONDS
    while (left := end - time.monotonic()) > 0 and sel.select(left):
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        total = _keep(out, chunk, total)
    return total


def _keep(out: bytearray, chunk: bytes, total: int) -> int:
    out += chunk
    if len(out) > 2 * MAX_OUTPUT_BYTES:  # only the tail is ever shown
        del out[:-MAX_OUTPUT_BYTES]
    return total + len(chunk)


def _tail(data: bytes, total: int) -> tuple[str, int]:
    data = data[-MAX_OUTPUT_BYTES:]
    while data and data[0] & 0xC0 == 0x80:  # do not start inside a UTF-8 character
        data = data[1:]
    lines = data.split(b"\n")
    if len(lines) > MAX_OUTPUT_LINES + 1:
        data = b"\n".join(lines[-MAX_OUTPUT_LINES - 1 :])
    return data.decode("utf-8", "replace").rstrip("\n"), total - len(data)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    if hasattr(os, "waitid"):
        # Peek without reaping: while the leader is a zombie its group id cannot be reused,
        # so the killpg that follows cannot hit an unrelated process group.
        try:
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True
    return proc.poll() is not None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)

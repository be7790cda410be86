"""bash: one command in the project root, in its own process group, with a hard time limit,
through the job's sandbox (`claw_batch.sandbox.bubblewrap`) unless the task runs it unsandboxed.

The whole group is killed when the command times out, floods its output, passes one of the
sandbox's ceilings (`claw_batch.sandbox.ceilings`: memory, disk), and also when it ends, so
background children can neither outlive the call nor hang it by holding the output pipe
open. (In the sandbox, that kill takes its whole PID namespace along, `setsid` or not.)
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import select
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from claw_batch import baton, cancel
from claw_batch.errors import ToolError
from claw_batch.sandbox.ceilings import CHECK_SECONDS, Watch
from claw_batch.sandbox.command import Command
from claw_batch.store import ledgerfile
from claw_batch.tools.base import ToolContext

# With pattern permissions a command must be one simple command: these would chain, pipe,
# substitute or redirect their way past the pattern.
CONTROL_OPERATORS = (";", "&", "|", "`", "$(", ">", "<", "\n")
MAX_OUTPUT_BYTES = 30_000
MAX_OUTPUT_LINES = 2000
FLOOD_BYTES = 64 << 20  # output past this is a flood: the command is killed
POLL_SECONDS = 0.05
DRAIN_SECONDS = 0.5  # after the kill, how long to wait for output still in flight
GONE_SECONDS = 5.0  # after the kill, how long to wait for the sandbox to be torn down


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
    plain = Command(("bash", "-c", command), ctx.env)
    if ctx.sandbox is None:
        if ctx.on_event is not None:
            ctx.on_event("unsandboxed", command=command)
        ledgerfile.unguarded(ctx.root / ".claw")  # it may write the ledger: not stamped
        # what the command reads (claw_batch.taint.jobtaint); other jobs run meanwhile (baton)
        with ctx.taint.watching(), baton.released():
            ran = run(plain, cwd=ctx.root, timeout=limit)
    else:
        with (
            baton.released(),
            ctx.sandbox.wrap(plain, cwd=ctx.root, seconds=limit) as confined,
            ctx.taint.watching(),  # the command, not claw's preparing of its sandbox
        ):
            ran = run(confined, cwd=ctx.root, timeout=limit)
    note = f"[... {ran.cut} bytes cut ...]\n" if ran.cut else ""
    return f"{_headline(ran, limit, timeout)}\n{note}{ran.output or '(no output)'}"


def _headline(ran: Ran, limit: float, timeout: int) -> str:
    if ran.killed == TIMED_OUT:
        shown = f"{limit:.0f}" if limit >= 1 else f"{limit:.1f}"
        head = f"timed out after {shown} s (the command and its children were killed)"
        return head + ("; the job's time limit is nearly reached" if limit < timeout else "")
    if ran.killed == FLOODED:
        return (
            f"killed: the output passed {FLOOD_BYTES >> 20} MB "
            "(the command and its children were killed)"
        )
    if ran.killed is not None and ran.late:
        ended = f"the command had ended, {_ended(ran.code)}, before a check saw it"
        return f"killed: {ran.killed} ({ended}; what it wrote stays)"
    if ran.killed is not None:  # a ceiling: it says which
        return f"killed: {ran.killed} (the command and its children were killed)"
    return _ended(ran.code)


def _ended(code: int) -> str:
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"


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


# Why `run` killed a command before it ended.
TIMED_OUT = "timed out"
FLOODED = "flooded"


@dataclass(frozen=True)
class Ran:
    code: int  # the exit code, negative: killed by that signal
    output: str  # the tail
    cut: int  # how many bytes of output were cut before the tail
    # TIMED_OUT, FLOODED, or why a ceiling stopped it: run killed it (and `code` says how)
    killed: str | None = None
    late: bool = False  # the ceiling was passed by a command that had ended meanwhile


def run(command: Command, *, cwd: Path, timeout: float) -> Ran:
    watch = command.ceilings.start() if command.ceilings is not None else None
    try:
        proc = subprocess.Popen(
            command.argv,
            cwd=cwd,
            env=dict(command.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=command.pass_fds,
        )
    except OSError as e:
        raise ToolError(f"cannot start {command.argv[0]}: {e.strerror or e}") from None
    leader, leader_pid = _leader(proc, command.leader)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    out = bytearray()
    total = 0
    stop = _Stop(time.monotonic() + timeout, watch, leader_pid)
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            ended, total = _pump(proc, sel, fd, out, stop)
    finally:
        _kill_group(proc.pid)
        if leader is not None:  # a sandbox's PID 1 has a session of its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(leader, signal.SIGKILL)
        proc.wait()
        if leader is not None:
            _await_exit(leader, time.monotonic() + GONE_SECONDS)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            total = _drain(sel, fd, out, total)
        proc.stdout.close()
    text, cut = _tail(bytes(out), total)
    if ended is None and watch is not None and (late := watch.over(None)) is not None:
        # It ended between two checks, having passed a ceiling meanwhile (fallocate takes a
        # file's space at once): the call is stopped all the same. The sandbox is gone, so
        # only the disk is left to see.
        return Ran(proc.returncode, text, cut, late, late=True)
    return Ran(proc.returncode, text, cut, ended)


@dataclass
class _Stop:
    """When `_pump` stops a command before it ends: its deadline, and its ceilings (checked
    every CHECK_SECONDS)."""

    deadline: float
    watch: Watch | None
    leader: int | None  # the pid of the sandbox's PID 1
    checked: float = 0.0

    def why(self, total: int) -> str | None:
        now = time.monotonic()
        if now >= self.deadline:
            return TIMED_OUT
        if total > FLOOD_BYTES:
            return FLOODED
        if self.watch is None or now - self.checked < CHECK_SECONDS:
            return None
        self.checked = now
        return self.watch.over(self.leader)


def _pump(
    proc: subprocess.Popen[bytes],
    sel: selectors.BaseSelector,
    fd: int,
    out: bytearray,
    stop: _Stop,
) -> tuple[str | None, int]:
    """Collect output until the command exits (None), or `stop` says why it must stop now:
    the deadline passed (TIMED_OUT), the output passed FLOOD_BYTES (FLOODED), a ceiling."""
    total, eof = 0, False
    while not _exited(proc):
        cancel.check()  # the run was cancelled: the caller's finally kills the group
        why = stop.why(total)
        if why is not None:
            return why, total
        left = min(stop.deadline - time.monotonic(), POLL_SECONDS)
        if eof:  # the command closed its output but still runs
            _wait(proc, max(left, 0.0))
        elif sel.select(max(left, 0.0)):
            chunk = os.read(fd, 65536)
            eof = not chunk
            total = _keep(out, chunk, total)
    return None, total


def _wait(proc: subprocess.Popen[bytes], seconds: float) -> None:
    """Sleep until the process exits (not reaped: see `_exited`) or `seconds` pass."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here
        time.sleep(seconds)
        return
    try:
        select.select([pidfd], [], [], seconds)
    finally:
        os.close(pidfd)


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


def _leader(proc: subprocess.Popen[bytes], report: int | None) -> tuple[int | None, int | None]:
    """A pidfd of the process the command reports on `report` (see `Command.leader`), opened
    while it runs, so that its pid cannot have been reused, and that pid; None, None
    without a report."""
    if report is None:
        return None, None
    line = b""
    deadline = time.monotonic() + GONE_SECONDS
    with selectors.DefaultSelector() as sel:
        sel.register(report, selectors.EVENT_READ)
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            if sel.select(POLL_SECONDS):
                chunk = os.read(report, 4096)
                if not chunk:
                    return None, None
                line += chunk
            elif proc.poll() is not None:
                return None, None  # it failed before starting anything
    try:
        pid = int(json.loads(line)["child-pid"])
        return os.pidfd_open(pid), pid
    except (ValueError, KeyError, TypeError, OSError):
        return None, None


def _await_exit(pidfd: int, deadline: float) -> None:
    """Wait until the process exits: a sandbox's PID 1 exits once its namespace is empty."""
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(pidfd, selectors.EVENT_READ)  # readable once it has exited
            sel.select(max(0.0, deadline - time.monotonic()))
    finally:
        os.close(pidfd)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)

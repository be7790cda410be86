"""One `claw run` at a time per project: an flock on `.claw/lock`.

The kernel drops an flock when the last descriptor of its open file closes, so a run that
dies in any way (SIGKILL included) leaves no stale lock to clean up. The file's content names
the holder for messages; it is a label, never the lock itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from claw_batch.clock import shown_iso
from claw_batch.errors import Locked

POLL_S = 0.05
# A holder writes its label right after flock(); a loser that finds no label (or the label
# of a dead process) retries this long before it settles for an anonymous message.
LABEL_GRACE_S = 0.25
# What a `claw run` that finds the project locked is told; a git hook, which cannot pass
# --wait through `git commit`, is told what to do from git instead (commands/hook.py).
ADVICE = "; wait for it or use --wait"


@dataclasses.dataclass(frozen=True)
class Holder:
    pid: int
    started: str  # ISO 8601 with the local offset
    argv: str

    def describe(self) -> str:
        text = f"locked by pid {self.pid} since {shown_iso(self.started)}"
        return f"{text} ({self.argv})" if self.argv else text


def lock_path(root: Path) -> Path:
    return root / ".claw" / "lock"


def read_holder(root: Path) -> Holder | None:
    """Who holds the project lock; None when nobody does (or the holder is still writing
    its label). Read-only: it never touches the lock, so it cannot get in a run's way."""
    try:
        return _parse(lock_path(root).read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        return None


class ProjectLock:
    """Hold `<root>/.claw/lock` for the length of a `with` block.

    Another holder, in this process or another, makes entering raise `Locked` at once; with
    `wait=True` it polls until the lock is free, or raises `Locked` after `timeout` seconds.
    `on_wait` is called once with the holder's description when waiting begins. The
    descriptor is close-on-exec: commands run by tools never inherit (nor prolong) the lock.
    A fork() without exec would share it, as would any copy of an open file.
    """

    def __init__(
        self,
        root: Path,
        *,
        wait: bool = False,
        timeout: float | None = None,
        argv: str = "",
        on_wait: Callable[[str], None] | None = None,
        advice: str = ADVICE,
    ) -> None:
        self.path = lock_path(root)
        self.advice = advice  # added to `locked by ...` when not waiting
        self.wait = wait
        self.timeout = timeout
        self.argv = argv
        self.on_wait = on_wait
        self.holder: Holder | None = None
        self._fd: int | None = None

    def __enter__(self) -> ProjectLock:
        if self._fd is not None:
            raise RuntimeError("ProjectLock is not re-entrant")
        self.path.parent.mkdir(exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._acquire(fd)
            self.holder = self._write_label(fd)
        except BaseException:
            os.close(fd)  # releases the flock too, if we got it
            raise
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        fd, self._fd, self.holder = self._fd, None, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):  # a full disk must not keep the lock held
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _acquire(self, fd: int) -> None:
        start = time.monotonic()
        told = False
        while not _try_flock(fd):
            waited = time.monotonic() - start
            holder = _parse(os.pread(fd, 4096, 0))
            if holder is None and waited < LABEL_GRACE_S:
                time.sleep(POLL_S / 2)
                continue
            described = holder.describe() if holder else "locked by another claw run"
            if not self.wait:
                raise Locked(described + self.advice)
            if self.timeout is not None and waited >= self.timeout:
                raise Locked(f"{described}; gave up waiting after {self.timeout:g} s")
            if not told and self.on_wait is not None:
                self.on_wait(described)
            told = True
            time.sleep(POLL_S)

    def _write_label(self, fd: int) -> Holder:
        now = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        holder = Holder(os.getpid(), now, self.argv)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(dataclasses.asdict(holder)) + "\n").encode(), 0)
            os.fsync(fd)
        except OSError:  # a full disk: the lock holds all the same, only unnamed
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        return holder


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _parse(data: bytes) -> Holder | None:
    try:
        info = json.loads(data)
        holder = Holder(int(info["pid"]), str(info["started"]), str(info.get("argv", "")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    # A run killed by SIGKILL leaves its label behind; only a live pid names the holder.
    return holder if _alive(holder.pid) else None


def _alive(pid: int) -> bool:
    if pid <= 0:  # kill(0) and kill(-1) mean process groups, not a process
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # it exists, under another user
        pass
    return True

"""A check over many jobs, shared between this process and a forked child.

The quick check of a large fan-out is two `stat` calls a job, ~2.5 µs each on one core: 0.5 s
of a 100,000-job no-op. A second process is the only way to a second core (threads would
take the GIL back and forth at every call). The child runs the same check on the same data,
already in its memory, and answers yes or no (a yes with what its own check found, framed by
its length); anything else it does (fails, is killed, says nothing or part of its answer)
counts as "does not hold", and the caller then checks each job in turn.

The jobs are taken in chunks from a pipe that holds the start of each, by whichever process
is free: the child may first make a check of its own (`first`: a no-op's listing of its
fan-out, claw_batch.plan.uptodate), and a process that a busy machine holds back takes fewer.
Either one that finds a chunk that does not hold takes the chunks left, so that the other
stops soon.
"""

from __future__ import annotations

import os
import signal
import struct
import threading
from collections.abc import Callable
from typing import NoReturn

from claw_batch.cores import usable_cores

# Below this many jobs the fork and the pages it copies cost about what the half saves.
MIN_SPLIT = 2_000
CHUNK = 1_000  # jobs a process takes at a time (~5 ms of stat calls)
_START = struct.Struct("=I")  # a chunk's start, as the pipe holds it
# 4 KiB of starts, written before the fork: what a pipe holds even when its user is past
# pipe-user-pages-soft (one page); more would wait for a reader that is not there yet.
_MAX_CHUNKS = 1_024
_LENGTH = struct.Struct("=I")  # how many bytes the child found, before them in its answer


def pays(n: int) -> bool:
    """Whether `n` jobs are shared with a forked child: enough jobs, a second core, and no
    other thread in this process (a child forked beside a thread could inherit a lock that
    thread held)."""
    return n >= MIN_SPLIT and usable_cores() >= 2 and threading.active_count() == 1


def all_in_halves(
    holds: Callable[[int, int], bool], n: int, first: Callable[[], bool] | None = None
) -> bool:
    """`holds(0, n)` (and `first()`), asked of chunks `holds(start, end)` taken in turn by
    this process and a forked child when it `pays`; here, in one call, when it does not."""
    said = None if first is None else lambda: b"" if first() else None
    return shared(holds, n, said) is not None


def shared(
    holds: Callable[[int, int], bool], n: int, first: Callable[[], bytes | None] | None = None
) -> bytes | None:
    """`all_in_halves`, where `first` says None when it does not hold, else a few bytes for
    this process (what the child found); those bytes, or None when a check did not hold."""
    if not pays(n):
        said = b"" if first is None else first()
        return said if said is not None and holds(0, n) else None
    chunk = max(CHUNK, -(-n // _MAX_CHUNKS))
    take, put = os.pipe()
    os.write(put, b"".join(_START.pack(start) for start in range(0, n, chunk)))
    os.close(put)  # once they are all taken, a read is the end of the file
    read, write = os.pipe()
    # Ctrl-C and SIGTERM reach the child too (the terminal signals the whole process group):
    # blocked in it from its first instruction, they cannot raise into the parent's stack,
    # which it shares (its except clauses would write the summary, the ledger...). The
    # parent takes them as soon as the fork returns.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        pid = os.fork()
    except OSError:  # no process to spare: one core it is
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in (take, read, write):
            os.close(fd)
        said = b"" if first is None else first()
        return said if said is not None and holds(0, n) else None
    if pid == 0:
        _child(read, write, lambda: _mine(take, first, holds, n, chunk))
    os.close(write)
    mine, answer = False, b""
    try:  # a Ctrl-C pending since the fork is raised as the mask goes: the child goes too
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        mine = _chunks(take, holds, n, chunk)
        while mine and (more := os.read(read, 65536)):
            answer += more
    finally:
        os.close(read)
        os.close(take)
        if not mine:  # its answer no longer matters
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return _whole(answer)


def _whole(answer: bytes) -> bytes | None:
    """What the child found, if its answer is a `1` and all of it: a child killed between
    two writes of a long answer leaves a part, which is a "does not hold"."""
    head = 1 + _LENGTH.size
    if answer[:1] != b"1" or len(answer) < head:
        return None
    (length,) = _LENGTH.unpack_from(answer, 1)
    return answer[head:] if len(answer) == head + length else None


def _chunks(take: int, holds: Callable[[int, int], bool], n: int, chunk: int) -> bool:
    """Chunks from the pipe until none is left; at the first that does not hold, the rest
    are taken too (the other process then finds none) and False."""
    while True:
        start = os.read(take, _START.size)
        if not start:
            return True
        if len(start) != _START.size or not holds(*_span(start, n, chunk)):
            _drain(take)
            return False


def _mine(
    take: int,
    first: Callable[[], bytes | None] | None,
    holds: Callable[[int, int], bool],
    n: int,
    chunk: int,
) -> bytes | None:
    """The child's share: its own check, then chunks. When its check does not hold (or
    raises), the chunks are taken, for the parent to stop at once."""
    try:
        said = b"" if first is None else first()
    except Exception:
        said = None
    if said is None:
        _drain(take)
        return None
    return said if _chunks(take, holds, n, chunk) else None


def _span(start: bytes, n: int, chunk: int) -> tuple[int, int]:
    (first,) = _START.unpack(start)
    return first, min(first + chunk, n)


def _drain(take: int) -> None:
    while os.read(take, 65536):
        pass


def _child(read: int, write: int, answer: Callable[[], bytes | None]) -> NoReturn:
    """The forked half: `1`, the length of what it found and that, or `0`, then out without
    running anything of the parent's (no atexit, no buffers flushed twice, the ledger's
    connection untouched). Whatever it raises is a "does not hold"."""
    try:
        os.close(read)
        said = answer()
        data = b"0" if said is None else b"1" + _LENGTH.pack(len(said)) + said
        while data:
            data = data[os.write(write, data) :]
    finally:
        os._exit(0)

"""A check over many jobs, split between this process and a forked child, one half each.

The quick check of a large fan-out is two `stat` calls a job, ~2.5 µs each on one core: 0.5 s
of a 100,000-job no-op. A second process is the only way to a second core (threads would
take the GIL back and forth at every call). The child runs the same check on the same data,
already in its memory, and answers one byte; anything else it does (fails, is killed, says
nothing) counts as "does not hold", and the caller then checks each job in turn.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import NoReturn

from claw_batch.cores import usable_cores

# Below this many jobs the fork and the pages it copies cost about what the half saves.
MIN_SPLIT = 2_000


def all_in_halves(holds: Callable[[int, int], bool], n: int) -> bool:
    """`holds(0, n)`, asked as `holds(0, n // 2)` here and `holds(n // 2, n)` in a forked
    child when it pays: enough jobs, a second core, and no other thread in this process (a
    child forked beside a thread could inherit a lock that thread held)."""
    if n < MIN_SPLIT or usable_cores() < 2 or threading.active_count() > 1:
        return holds(0, n)
    half = n // 2
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
        os.close(read)
        os.close(write)
        return holds(0, n)
    if pid == 0:
        _child(read, write, lambda: holds(half, n))
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.close(write)
    mine = False
    try:
        mine = holds(0, half)
        theirs = mine and os.read(read, 1) == b"1"
    finally:
        os.close(read)
        if not mine:  # its answer no longer matters
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return theirs


def _child(read: int, write: int, holds: Callable[[], bool]) -> NoReturn:
    """The forked half: one byte, then out without running anything of the parent's (no
    atexit, no buffers flushed twice, the ledger's connection untouched)."""
    try:
        os.close(read)
        os.write(write, b"1" if holds() else b"0")
    finally:
        os._exit(0)

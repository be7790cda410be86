"""One job thread at a time runs Python; the others wait for the baton, not for the GIL.

A job's Python work comes in bursts between waits (the model's reply, a subprocess, an fsync),
and each burst makes dozens of system calls (a file read, a socket send, an SQLite statement),
each of which lets go of the GIL. With many job threads ready to run, every one of those calls
hands the GIL to another thread and waits to get it back: two context switches a call. At
-j 32 with a fast model that was ~125 switches a turn and a third of claw's CPU in the kernel,
and it grew with -j (bench/parallel.py, zero latency: 1.7 ms of CPU a turn at -j 1, 3.0 ms at
-j 32, 3.8 ms at -j 100).

So the job threads (and the scheduler) take turns: a thread holds the baton while it runs and
hands it on while it waits for something outside the process (`released`). A thread waiting
for the baton sleeps on a lock of its own, so a burst's system calls find nobody waiting for
the GIL, and the GIL changes hands once a wait instead of twice a system call. Waiters are
served in order.

The baton is for speed only, never for correctness: a thread that waits for it while its
holder has not handed it on for PATIENCE seconds (a wait that was not marked `released`, a
long computation) goes on without it, so a forgotten wait costs time, never a deadlock. Threads
that never take it (the screen's, a connecting thread's) are not slowed by it.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator

PATIENCE = 0.2  # seconds without a hand-over after which a waiting thread goes on without it

_mutex = threading.Lock()  # guards the three below
_busy = False  # whether some thread holds the baton
_handovers = 0  # counts hand-overs, so that a waiter can tell a stuck holder from a busy one
_waiting: deque[threading.Lock] = deque()  # a locked lock per waiting thread, first come first
_local = threading.local()  # .member: takes part (inside `held`); .held: holds the baton now


def holding() -> bool:
    return getattr(_local, "held", False)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Run the block as one of the threads that take turns (nothing changes for a thread that
    is one already)."""
    if getattr(_local, "member", False):
        yield
        return
    _local.member = True
    try:
        _take()
        yield
    finally:
        _give()
        _local.member = False


@contextlib.contextmanager
def released() -> Iterator[None]:
    """Hand the baton on while the block waits for something outside the process; wait for
    it again after. Nothing changes for a thread outside `held`."""
    if not getattr(_local, "member", False):
        yield
        return
    _give()
    try:
        yield
    finally:
        _take()


def pass_on() -> None:
    """Let the threads waiting for the baton have their turn, then take it back: for a thread
    that has just started jobs and should let them start before it goes on."""
    if holding() and _waiting:
        _give()
        _take()


def _take() -> None:
    global _busy, _handovers
    with _mutex:
        if not _busy:
            _busy = True
            _handovers += 1
            _local.held = True
            return
        turn = threading.Lock()
        turn.acquire()
        _waiting.append(turn)
    while True:
        seen = _handovers
        try:
            ours = turn.acquire(timeout=PATIENCE)  # released by _give: the baton is ours
        except BaseException:  # Ctrl-C in the main thread: leave the line
            if not _leave(turn):
                _local.held = True
                _give()  # handed to us meanwhile: on to the next
            raise
        if ours:
            _local.held = True
            return
        with _mutex:
            if _handovers != seen:
                continue  # the baton moves: wait for our turn
        if _leave(turn):
            _local.held = False  # its holder is stuck: go on without it
            return


def _leave(turn: threading.Lock) -> bool:
    """Out of the line of waiters; False if the baton was handed to `turn` already."""
    with _mutex:
        try:
            _waiting.remove(turn)
        except ValueError:
            return False
        return True


def _give() -> None:
    global _busy, _handovers
    if not holding():
        return
    _local.held = False
    with _mutex:
        _handovers += 1
        if _waiting:
            _waiting.popleft().release()  # theirs now: _busy stays True
        else:
            _busy = False

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
# The thread that holds the baton (threading.get_ident), None when nobody does. Kept here,
# not by each thread, so that a Ctrl-C landing anywhere in a hand-over cannot lose it: the
# thread either holds it, and gives it on when it lets go, or does not.
_holder: int | None = None
_handovers = 0  # counts hand-overs, so that a waiter can tell a stuck holder from a busy one
_waiting: deque[tuple[int, threading.Lock]] = deque()  # each waiting thread, first come first
_local = threading.local()  # .member: takes part (inside `held`); .away: inside `released`


def holding() -> bool:
    return _holder == threading.get_ident()


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
        _local.member = False
        let_go()


def released() -> contextlib.AbstractContextManager[None]:
    """Hand the baton on while the block waits for something outside the process; wait for
    it again after. Nothing changes for a thread outside `held`, nor inside a `released`."""
    return _Released()


class _Released:
    """`released`, as a class: it is entered around every wait of every job (a model call's,
    an fsync's), and a generator-based context manager costs three times as much."""

    __slots__ = ("_away",)

    def __enter__(self) -> None:
        self._away = False
        if not getattr(_local, "member", False) or getattr(_local, "away", False):
            return
        _local.away = True
        let_go()
        self._away = True

    def __exit__(self, *exc: object) -> None:
        if self._away:
            _local.away = False
            _take()


def pass_on() -> None:
    """Let the threads waiting for the baton have their turn, then take it back: for a thread
    that has just started jobs and should let them start before it goes on."""
    if holding() and _waiting:
        let_go()
        _take()


def let_go() -> None:
    """Hand the baton to the next waiting thread, if this one holds it."""
    global _holder, _handovers
    me = threading.get_ident()
    with _mutex:
        if _holder != me:
            return
        _handovers += 1
        if _waiting:
            _holder, turn = _waiting.popleft()
            turn.release()
        else:
            _holder = None


def _take() -> None:
    global _holder, _handovers
    me = threading.get_ident()
    with _mutex:
        if _holder is None or _holder == me:
            _holder = me
            _handovers += 1
            return
        turn = threading.Lock()
        turn.acquire()
        _waiting.append((me, turn))
    while True:
        seen = _handovers
        try:
            if turn.acquire(timeout=PATIENCE):  # released by let_go: the baton is ours
                return
        except BaseException:  # Ctrl-C in the main thread: out of the line, or on with it
            if not _leave(me, turn):
                let_go()
            raise
        with _mutex:
            if _handovers != seen:
                continue  # the baton moves: wait for our turn
        if _leave(me, turn):
            return  # its holder is stuck: go on without it


def _leave(me: int, turn: threading.Lock) -> bool:
    """Out of the line of waiters; False if the baton was handed to this thread already."""
    with _mutex:
        try:
            _waiting.remove((me, turn))
        except ValueError:
            return False
        return True

"""Work a run will need only after its first model reply (a tool's code and its validator:
pydantic, ~0.1 s of a core), done on a thread of its own once the first request has left.

The process waits for the model then, so the work takes the time of no one; before that it
would compete for the GIL with what the first request needs. `soon` names the work (a run
does, as its jobs start), the transport calls `begin` after each request it sent, and the
first of those starts the thread. What it has not done by the time it is needed is done
there, as before: the work must be safe to do twice, or at once on two threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_work: list[Callable[[], object]] = []
_lock = threading.Lock()
_started = False


def soon(*work: Callable[[], object]) -> None:
    """Do `work` once a request is in flight; nothing once the thread has started."""
    with _lock:
        if not _started:
            _work.extend(w for w in work if w not in _work)


def begin() -> None:
    """A request has left: start the work (the first time; later calls cost a look)."""
    global _started
    if _started:
        return
    with _lock:
        if _started or not _work:
            return
        _started = True
        work = tuple(_work)
        _work.clear()
    threading.Thread(target=_do, args=(work,), name="claw-warmup", daemon=True).start()


def _do(work: tuple[Callable[[], object], ...]) -> None:
    for w in work:
        try:
            w()
        except ImportError:  # said where the work is needed, by the job that needs it
            return

"""A process's start-up: until its first model request has left, what that request needs
comes first, and the rest waits for the time the process waits for the model anyway.

- Work a run needs only after the model's first reply (a tool's code and its validator:
  pydantic, ~0.1 s of a core): `soon` names it, as a job builds its tool loop, and it is done
  on a thread of its own once the first request has left (`request_left`, which the
  transport calls after each request it sent). What that thread has not done when it is
  needed is done there, as before: the work must be safe to do twice, or at once on two
  threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_work: list[Callable[[], object]] = []
_lock = threading.Lock()
_left = False  # the first request has left


def soon(*work: Callable[[], object]) -> None:
    """Do `work` once a request is in flight; nothing once the first one has left."""
    with _lock:
        if not _left:
            _work.extend(w for w in work if w not in _work)


def request_left() -> None:
    """A request has left: the start-up is over (the first time; later calls cost a look)."""
    global _left
    if _left:
        return
    with _lock:
        if _left:
            return
        _left = True
        work = tuple(_work)
        _work.clear()
    if work:
        threading.Thread(target=_do, args=(work,), name="claw-warmup", daemon=True).start()


def _do(work: tuple[Callable[[], object], ...]) -> None:
    for w in work:
        try:
            w()
        except Exception:  # said where the work is needed, by the job that needs it
            return

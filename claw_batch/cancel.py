"""Cancelling a run. Ctrl-C and SIGTERM reach the main thread only; jobs that run in worker
threads notice this flag at their next wait (a model call, a tool process, a pause before a
retry, a place in a provider's queue) and stop as if interrupted."""

from __future__ import annotations

import threading
import time

from claw_batch import baton

POLL = 0.1  # seconds between looks at the flag while waiting

_cancelled = threading.Event()


def cancel() -> None:
    _cancelled.set()


def reset() -> None:
    _cancelled.clear()


def cancelled() -> bool:
    return _cancelled.is_set()


def check() -> None:
    if _cancelled.is_set():
        raise KeyboardInterrupt


def sleep(seconds: float) -> None:
    """time.sleep that ends early, with KeyboardInterrupt, when the run is cancelled."""
    with baton.released():
        if _cancelled.wait(max(seconds, 0)):
            raise KeyboardInterrupt


def acquire(lock: threading.Semaphore, deadline: float) -> bool:
    """Take the semaphore, or give up at the deadline (False) or on cancel."""
    if lock.acquire(blocking=False):
        return True
    with baton.released():
        while True:
            check()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if lock.acquire(timeout=min(left, POLL)):
                return True

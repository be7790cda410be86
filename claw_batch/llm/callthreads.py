"""Daemon threads for blocking work a job must be able to give up on, reused.

What cannot be cut into short waits (connecting to an endpoint; a whole model call when a
proxy is configured, see `openai_compat`) runs on a thread of its own, so that the job waiting
for it can give up at its deadline or on Ctrl-C while a hung endpoint keeps that thread (until
the SDK's own timeout ends it). Starting a thread each time costs more than the work under
load (the new thread must win the GIL before `start` returns), so threads are kept: a call
takes an idle one, or a new one when none is idle, never waiting for a busy one. A thread idle
for IDLE seconds ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")
IDLE = 30.0  # seconds a thread waits for another call before it ends


class Call(Generic[T]):
    """One function call, run on another thread; `wait` for it, then `result`."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # handed to the waiting thread, which decides
            self._error = exc
        finally:
            self._done.set()

    def wait(self, timeout: float) -> bool:
        """True once the call has finished; False if `timeout` seconds passed first."""
        return self._done.wait(timeout)

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        return cast(T, self._value)  # set, since there was no error


class CallThreads:
    def __init__(self, name: str = "claw-model-call", idle: float = IDLE) -> None:
        self._name = name
        self._idle_timeout = idle
        self._calls: queue.SimpleQueue[Call[Any]] = queue.SimpleQueue()
        # One token per idle thread that no queued call has claimed yet.
        self._idle = threading.Semaphore(0)

    def submit(self, fn: Callable[[], T]) -> Call[T]:
        call = Call(fn)
        self._calls.put(call)
        if not self._idle.acquire(blocking=False):
            threading.Thread(target=self._work, name=self._name, daemon=True).start()
        return call

    def _work(self) -> None:
        while True:
            try:
                call = self._calls.get(timeout=self._idle_timeout)
            except queue.Empty:
                if self._idle.acquire(blocking=False):
                    return  # one idle thread fewer, and no call counts on it
                continue  # a call claimed this thread's token: it is in the queue
            call.run()
            self._idle.release()

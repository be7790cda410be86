from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import HANG

from claw_batch.llm.callthreads import Call, CallThreads


def finished(call: Call[Any], within: float = 5.0) -> bool:
    return call.wait(within)


def test_a_call_runs_on_another_thread_and_gives_its_result() -> None:
    threads = CallThreads()
    call = threads.submit(threading.get_ident)
    assert finished(call)
    assert call.result() != threading.get_ident()


def test_an_error_is_raised_by_result() -> None:
    def fail() -> None:
        raise ValueError("boom")

    call = CallThreads().submit(fail)
    assert finished(call)
    with pytest.raises(ValueError, match="boom"):
        call.result()


def test_calls_one_after_another_reuse_one_thread() -> None:
    threads = CallThreads()
    idents = set()
    for _ in range(5):
        call = threads.submit(threading.get_ident)
        assert finished(call)
        idents.add(call.result())
        time.sleep(0.01)  # the thread goes back to idle after the result is handed over
    assert len(idents) == 1


def test_a_busy_thread_never_delays_another_call() -> None:
    threads = CallThreads()
    release = threading.Event()
    hung = threads.submit(lambda: release.wait(2 * HANG))
    try:
        # Queued behind the hung call, the quick one would not finish before `release`.
        quick = threads.submit(lambda: "answer")
        assert finished(quick, HANG)
        assert quick.result() == "answer"
        assert not hung.wait(0)  # still hung when the quick one finished
    finally:
        release.set()
    assert finished(hung)


def test_an_idle_thread_ends() -> None:
    threads = CallThreads(name="claw-test-idle", idle=0.1)
    assert finished(threads.submit(lambda: None))
    deadline = time.monotonic() + 5
    while any(t.name == "claw-test-idle" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the idle thread never ended"
        time.sleep(0.02)
    call = threads.submit(lambda: "still served")  # a new thread is started for it
    assert finished(call)
    assert call.result() == "still served"


def test_many_calls_at_once_all_finish() -> None:
    threads = CallThreads(idle=0.2)
    gate = threading.Barrier(20, timeout=5)
    calls = [threads.submit(gate.wait) for _ in range(20)]  # all 20 must run at the same time
    assert all(finished(c) for c in calls)
    assert sorted(c.result() for c in calls) == list(range(20))

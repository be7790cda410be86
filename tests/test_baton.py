"""The baton (claw_batch/baton.py): the job threads take turns to run Python, hand it on while
they wait for something outside the process, are served in order, and never deadlock on it."""

from __future__ import annotations

import _thread
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from claw_batch import baton, cancel
from claw_batch.llm import interruptible
from claw_batch.llm.breaker import Breaker
from claw_batch.plan.jobs import Job
from claw_batch.run.pool import Scheduler
from claw_batch.run.results import JobResult, not_run
from claw_batch.safety.atomic import DirSyncs, write_atomic
from claw_batch.safety.safeopen import write_file

HANG = 30.0  # seconds before a test that should not block says it did (never reached when right)


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    yield
    assert baton._holder is None and not baton._waiting, "a test left the baton taken"


def start(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def finish(*threads: threading.Thread) -> None:
    for thread in threads:
        thread.join(HANG)
        assert not thread.is_alive(), "blocked"


def until(condition: Callable[[], bool]) -> None:
    for _ in range(int(HANG / 0.001)):
        if condition():
            return
        threading.Event().wait(0.001)
    raise AssertionError("never happened")


def queued(n: int) -> Callable[[], bool]:
    return lambda: len(baton._waiting) == n


def test_one_thread_at_a_time_runs_between_its_waits() -> None:
    inside, most, lock = [0], [0], threading.Lock()

    def job() -> None:
        with baton.held():
            for _ in range(200):
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                os.stat(os.curdir)  # a system call: lets go of the GIL, not of the baton
                os.getpid()
                with lock:
                    inside[0] -= 1
                with baton.released():  # a wait for the world: another thread goes on
                    os.stat(os.curdir)

    finish(*[start(job) for _ in range(8)])
    assert most[0] == 1


def test_waiting_threads_are_served_in_the_order_they_came(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baton, "PATIENCE", HANG)
    order: list[int] = []

    def waiter(n: int) -> Callable[[], None]:
        def run() -> None:
            with baton.held():
                order.append(n)

        return run

    with baton.held():
        threads = []
        for n in range(5):
            threads.append(start(waiter(n)))
            until(queued(n + 1))
    finish(*threads)
    assert order == [0, 1, 2, 3, 4]


def test_pass_on_lets_the_waiting_threads_run_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baton, "PATIENCE", HANG)
    order: list[str] = []

    def job() -> None:
        with baton.held():
            order.append("job")

    with baton.held():
        thread = start(job)
        until(queued(1))
        baton.pass_on()
        order.append("scheduler")
        assert baton.holding()
    finish(thread)
    assert order == ["job", "scheduler"]


def test_a_holder_stuck_in_a_wait_it_did_not_mark_does_not_block_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(baton, "PATIENCE", 0.01)
    stuck, ran = threading.Event(), threading.Event()

    def holder() -> None:
        with baton.held():
            stuck.wait(HANG)  # a wait nobody marked `released`

    def other() -> None:
        with baton.held():
            ran.set()
            assert not baton.holding()  # went on without it

    first = start(holder)
    until(lambda: baton._holder is not None)
    second = start(other)
    assert ran.wait(HANG)
    stuck.set()
    finish(first, second)


def test_ctrl_c_while_waiting_leaves_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baton, "PATIENCE", HANG)
    release = threading.Event()

    def holder() -> None:
        with baton.held():
            release.wait(HANG)

    thread = start(holder)
    until(lambda: baton._holder is not None)
    timer = threading.Timer(0.05, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt), baton.held():
        pass
    assert not baton._waiting  # nobody will hand the baton to a thread that left
    release.set()
    finish(thread)


def test_released_and_pass_on_are_no_ops_outside_held() -> None:
    with baton.released():
        assert not baton.holding()
    baton.pass_on()
    assert baton._holder is None


def test_a_job_runs_holding_the_baton_and_so_does_the_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(baton, "PATIENCE", HANG)  # a loaded machine must not make it go on without
    seen: list[bool] = []

    def check(job: Job) -> Callable[[], JobResult]:
        def work() -> JobResult:
            seen.append(baton.holding())
            return not_run(job, "ok", ())

        return work

    jobs = [Job("t", str(n)) for n in range(4)]
    results: list[JobResult] = []

    def on_result(result: JobResult) -> bool:
        seen.append(baton.holding())
        results.append(result)
        return False

    Scheduler(
        jobs=2,
        upstream=lambda name: (),
        expand=lambda name: list(jobs),
        check=check,
        on_result=on_result,
        settle_all=lambda name, jobs: False,
        on_task_done=lambda name: None,
    ).run(["t"])
    assert len(results) == 4 and all(seen)


def test_waiting_for_a_model_reply_hands_the_baton_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baton, "PATIENCE", HANG)  # no going on without it: only a hand-over
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    waiting, got = threading.Event(), []

    def reader() -> None:
        with baton.held():
            waiting.set()
            got.append(interruptible.recv_into(ours, memoryview(bytearray(16)), HANG))

    def other() -> None:
        with baton.held():
            theirs.send(b"reply")

    cancel.reset()
    try:
        first = start(reader)
        assert waiting.wait(HANG)
        until(lambda: baton._holder is None)  # the reader waits for its reply without the baton
        finish(start(other), first)
        assert got == [5]
    finally:
        ours.close()
        theirs.close()


def test_a_released_inside_a_released_neither_takes_the_baton_nor_loses_it() -> None:
    with baton.held():
        with baton.released():
            with baton.released():
                assert baton._holder is None
            assert baton._holder is None  # still waiting for the world
        assert baton.holding()
    assert baton._holder is None


def test_a_holder_that_let_go_twice_after_a_ctrl_c_gives_the_baton_on_once() -> None:
    """A Ctrl-C in the middle of a hand-over: whoever holds the baton is known to the baton,
    not only to the thread, so letting go again (the scheduler does, on Ctrl-C) is safe."""
    with baton.held():
        baton.let_go()
        baton.let_go()
        assert baton._holder is None
    assert baton._holder is None


def test_a_jobs_output_is_synced_without_the_baton_but_a_write_under_a_lock_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory tool and the cassettes write under a lock of theirs: handing the baton on
    for their fsync would let its next holder wait for that lock, holding the baton."""
    held_at_fsync: list[bool] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            held_at_fsync.append(baton.holding())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with baton.held():
        write_atomic(tmp_path / "MEMORY.md", "a fact\n")
        write_file(tmp_path, tmp_path / "out.md", "out.md", b"an answer\n", synced=DirSyncs())
    assert held_at_fsync == [True, False]


def test_waiting_for_another_jobs_probe_hands_the_baton_on() -> None:
    breaker = Breaker()
    breaker.failed(breaker.admit("m", time.monotonic() + 10), "HTTP 503", 0.0)
    probe = breaker.admit("m", time.monotonic() + 10)  # in flight: the others wait for it
    waiting = threading.Event()
    real_wait = breaker._cond.wait

    def wait(timeout: float | None = None) -> bool:
        waiting.set()
        return real_wait(timeout)

    breaker._cond.wait = wait  # type: ignore[method-assign]

    def job() -> None:
        with baton.held():
            breaker.admit("m", time.monotonic() + 10)

    thread = start(job)
    assert waiting.wait(HANG)
    until(lambda: baton._holder is None)  # it waits for the probe without the baton
    breaker.succeeded(probe)
    finish(thread)

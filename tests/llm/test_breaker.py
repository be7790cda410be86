"""llm.breaker: one endpoint's health, shared by the jobs that call it.

A fake clock that the breaker's sleep advances; threads only where waiting for a probe is
the point (and then real time, with generous bounds)."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import HANG, NOT_HELD_UP, since

from claw_batch.errors import LimitExceeded, ModelError
from claw_batch.llm.breaker import Breaker, Ticket, backoff


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 3))
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def breaker(clock: Clock) -> Breaker:
    return Breaker(clock=clock, sleep=clock.sleep)


FAR = 10_000.0  # a deadline that never matters


def test_a_closed_breaker_lets_calls_through_at_once(breaker: Breaker, clock: Clock) -> None:
    first = breaker.admit("m", FAR)
    breaker.succeeded(first)
    assert breaker.admit("m", FAR) == Ticket(0)
    assert clock.sleeps == []


def test_retry_after_is_waited_out_then_one_probe_closes_it(breaker: Breaker, clock: Clock) -> None:
    ticket = breaker.admit("m", FAR)
    breaker.failed(ticket, "HTTP 429: slow down", 7.0)
    probe = breaker.admit("m", FAR)
    assert clock.sleeps == [7.0]
    assert probe == Ticket(1, probe=True)
    breaker.succeeded(probe)
    assert breaker.admit("m", FAR) == Ticket(1)  # closed again: no wait, no probe
    assert clock.sleeps == [7.0]


def test_the_backoff_doubles_with_each_failed_probe(breaker: Breaker, clock: Clock) -> None:
    ticket = breaker.admit("m", FAR)
    for _ in range(4):
        breaker.failed(ticket, "HTTP 503: overloaded", None)
        ticket = breaker.admit("m", FAR)
    assert len(clock.sleeps) == 4
    assert all(c / 2 <= w <= c for w, c in zip(clock.sleeps, (1, 2, 4, 8), strict=True))


def test_calls_in_flight_when_it_opened_are_one_burst(breaker: Breaker, clock: Clock) -> None:
    in_flight = [breaker.admit("m", FAR) for _ in range(8)]
    breaker.failed(in_flight[0], "HTTP 503: overloaded", None)
    for ticket in in_flight[1:]:  # the other seven come back with the same 503
        breaker.failed(ticket, "HTTP 503: overloaded", None)
    breaker.admit("m", FAR)
    # One failure in a row, not eight: a wait of the first backoff step, not 2**7 s.
    assert len(clock.sleeps) == 1 and clock.sleeps[0] <= 1.0


def test_a_late_failure_does_not_reopen_a_breaker_that_closed(
    breaker: Breaker, clock: Clock
) -> None:
    early, late = breaker.admit("m", FAR), breaker.admit("m", FAR)
    breaker.failed(early, "HTTP 429: slow down", 2.0)
    probe = breaker.admit("m", FAR)
    breaker.succeeded(probe)
    breaker.failed(late, "HTTP 429: slow down", 2.0)  # sent before the storm, back after it
    assert breaker.admit("m", FAR) == Ticket(1)
    assert clock.sleeps == [2.0]


def test_a_late_failure_can_lengthen_the_wait(breaker: Breaker, clock: Clock) -> None:
    early, late = breaker.admit("m", FAR), breaker.admit("m", FAR)
    breaker.failed(early, "HTTP 429: slow down", 2.0)
    breaker.failed(late, "HTTP 429: slow down", 5.0)
    breaker.admit("m", FAR)
    assert clock.sleeps == [5.0]


def test_a_wait_past_the_deadline_fails_at_once(breaker: Breaker, clock: Clock) -> None:
    breaker.failed(breaker.admit("m", FAR), "HTTP 429: Rate limit reached", 120.0)
    with pytest.raises(LimitExceeded) as e:
        breaker.admit("m", clock.now + 5)
    assert str(e.value) == (
        "timeout: the model endpoint asked to retry after 120 s (HTTP 429: Rate limit reached), "
        "which exceeds the 5.0 s left before the job's deadline"
    )
    assert clock.sleeps == []


def test_a_backoff_past_the_deadline_fails_at_once(breaker: Breaker, clock: Clock) -> None:
    breaker.failed(breaker.admit("m", FAR), "connection error: Connection error.", None)
    with pytest.raises(LimitExceeded) as e:
        breaker.admit("m", clock.now + 0.1)
    assert str(e.value) == (
        "timeout: the model call failed (connection error: Connection error.) and the job's "
        "deadline leaves no time to retry"
    )


def test_a_broken_endpoint_fails_every_call_at_once(breaker: Breaker, clock: Clock) -> None:
    breaker.broken("HTTP 401: bad key; check the API key")
    for model in ("m", "other"):
        with pytest.raises(ModelError) as e:
            breaker.admit(model, FAR)
        assert str(e.value) == "HTTP 401: bad key; check the API key"
    assert clock.sleeps == []


def test_broken_for_one_model_only(breaker: Breaker) -> None:
    breaker.broken("HTTP 403: no access to m", "m")
    with pytest.raises(ModelError, match="no access to m"):
        breaker.admit("m", FAR)
    assert breaker.admit("other", FAR) == Ticket(0)


def test_the_first_refusal_is_the_message(breaker: Breaker) -> None:
    breaker.broken("first")
    breaker.broken("second")
    with pytest.raises(ModelError, match=r"^first$"):
        breaker.admit("m", FAR)


def test_an_abandoned_probe_lets_another_call_probe(breaker: Breaker, clock: Clock) -> None:
    breaker.failed(breaker.admit("m", FAR), "HTTP 503: overloaded", 1.0)
    probe = breaker.admit("m", FAR)
    breaker.abandoned(probe)  # its job hit its deadline or was cancelled
    assert breaker.admit("m", FAR).probe


def test_calls_wait_for_the_probe_and_go_together_when_it_succeeds() -> None:
    breaker = Breaker()
    breaker.failed(breaker.admit("m", FAR), "HTTP 429: slow down", 0.0)
    probe = breaker.admit("m", time.monotonic() + 30)
    assert probe.probe
    admitted: list[Ticket] = []

    def call() -> None:
        admitted.append(breaker.admit("m", time.monotonic() + 30))

    waiters = [threading.Thread(target=call) for _ in range(4)]
    for t in waiters:
        t.start()
    time.sleep(0.3)
    assert admitted == []  # all four wait for the probe's outcome
    breaker.succeeded(probe)
    for t in waiters:
        t.join(timeout=HANG)
    assert admitted == [Ticket(1)] * 4


def test_waiting_for_a_probe_ends_at_the_deadline() -> None:
    breaker = Breaker()
    breaker.failed(breaker.admit("m", FAR), "HTTP 429: slow down", 0.0)
    assert breaker.admit("m", FAR).probe  # and it never comes back
    with pytest.raises(LimitExceeded) as e:
        breaker.admit("m", time.monotonic() + 0.3)
    assert str(e.value) == (
        "timeout: the job's deadline passed while the model endpoint was failing "
        "(HTTP 429: slow down)"
    )


def test_backoff_is_capped() -> None:
    assert 30 <= backoff(7) <= 60
    assert 30 <= backoff(30) <= 60


@pytest.mark.parametrize("probing", [False, True])
def test_ctrl_c_ends_a_wait_at_once(probing: bool) -> None:
    from claw_batch import cancel

    breaker = Breaker()
    breaker.failed(breaker.admit("m", FAR), "HTTP 429: slow down", 0.0 if probing else HANG)
    if probing:
        assert breaker.admit("m", FAR).probe  # the others wait for its outcome
    timer = threading.Timer(0.2, cancel.cancel)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            breaker.admit("m", time.monotonic() + 2 * HANG)
    finally:
        timer.cancel()
        cancel.reset()
    assert since(started) < NOT_HELD_UP  # not the wait asked for, nor the deadline

"""One endpoint's health, shared by every job of a run that calls it: a circuit breaker.

    closed     calls go out.
    open       the endpoint failed (a 429, a 5xx, no connection, a request timeout): no call
               goes out until the wait it asked for (Retry-After) is over or, when it named
               none, a backoff that doubles with each failure in a row.
    half-open  the wait is over: one call, the probe, goes out and the others wait for its
               outcome. An answer closes the breaker and lets them all go; a failure opens
               it again.
    broken     the endpoint refused the account (401, insufficient_quota) or, for one model,
               the key's access to it (403): for the rest of the run every call fails at once
               with the same message, and none goes out.

With -j 8 and an endpoint that answers 429 for a minute, the endpoint gets the requests that
were in flight when the storm began plus one probe per wait, not eight jobs retrying each on
its own. A job never waits past its deadline, and gives up at once when the wait the endpoint
asked for would take it past.

A failure of a call let through before the breaker last opened (`Ticket.epoch`) belongs to the
burst that opened it: it can lengthen the wait, but neither doubles the backoff nor, once the
breaker has closed again, reopens it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from claw_batch import baton, cancel
from claw_batch.errors import LimitExceeded, ModelError

BACKOFF_BASE = 1.0
BACKOFF_CAP = 60.0


@dataclass(frozen=True)
class Ticket:
    """A call let through: `epoch` counts the times the breaker had opened by then."""

    epoch: int
    probe: bool = False  # the one call of a half-open breaker


class Breaker:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = cancel.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep  # ends early with KeyboardInterrupt on Ctrl-C (cancel.sleep)
        self._cond = threading.Condition(threading.Lock())
        self._epoch = 0
        self._open = False
        self._until = 0.0  # while open: no call before this time (clock)
        self._window = 0  # changes with `_until`: a waiter that slept through it may probe
        self._probing = False
        self._failures = 0  # in a row, for the backoff
        self._reason = ""  # the last failure: "HTTP 429: Rate limit reached"
        self._asked = False  # whether the wait is what the endpoint asked for
        self._broken: dict[str | None, str] = {}  # model (None: every model) -> message

    def admit(self, model: str, deadline: float) -> Ticket:
        """Wait until a call to `model` may go out; raises ModelError when the endpoint is
        broken for it, LimitExceeded when the wait would pass `deadline`."""
        epoch = self._epoch  # read first: a breaker opening meanwhile makes the ticket stale
        if not self._open and not self._broken:  # the common case, without the lock
            return Ticket(epoch)
        slept_through: int | None = None
        with self._cond:
            while True:
                message = self._broken.get(None) or self._broken.get(model)
                if message is not None:
                    raise ModelError(message)
                if not self._open:
                    return Ticket(self._epoch)
                if self._probing:
                    self._await_probe(deadline)
                    continue
                now = self._clock()
                wait = self._until - now
                if wait <= 0 or slept_through == self._window:
                    self._probing = True
                    return Ticket(self._epoch, probe=True)
                if now + wait > deadline:
                    raise LimitExceeded(self._too_long(wait, deadline - now))
                slept_through = self._window
                self._cond.release()
                try:
                    self._sleep(wait)
                finally:
                    self._cond.acquire()

    def succeeded(self, ticket: Ticket) -> None:
        """The endpoint answered the call (whatever it said, it is up)."""
        if not ticket.probe and not self._open:
            return
        with self._cond:
            if ticket.probe:
                self._probing = False
            if ticket.epoch == self._epoch:
                self._open = False
                self._failures = 0
            self._cond.notify_all()

    def failed(self, ticket: Ticket, reason: str, retry_after: float | None) -> None:
        """The call failed in a way that waiting may fix; `retry_after`: the seconds the
        endpoint asked for, if it did."""
        with self._cond:
            if ticket.probe:
                self._probing = False
            stale = ticket.epoch != self._epoch
            if stale and not self._open:  # from before a storm the endpoint has come out of
                self._cond.notify_all()
                return
            if not stale:
                self._failures += 1
            wait = retry_after if retry_after is not None else backoff(max(1, self._failures))
            until = self._clock() + wait
            if not stale:
                self._epoch += 1
                self._open = True
            if not stale or until > self._until:
                self._until = until
                self._window += 1
                self._reason = reason
                self._asked = retry_after is not None
            self._cond.notify_all()

    def abandoned(self, ticket: Ticket) -> None:
        """The call ended without a word from the endpoint (the job's deadline, Ctrl-C)."""
        if ticket.probe:
            with self._cond:
                self._probing = False
                self._cond.notify_all()

    def broken(self, message: str, model: str | None = None) -> None:
        """From now on every call (to `model`, or any) fails at once with `message`."""
        with self._cond:
            self._broken.setdefault(model, message)
            self._cond.notify_all()

    def _await_probe(self, deadline: float) -> None:
        left = deadline - self._clock()
        if left <= 0:
            raise LimitExceeded(
                f"timeout: the job's deadline passed while the model endpoint was failing "
                f"({self._reason})"
            )
        # Without the baton, and without the lock while taking the baton back: its holder may
        # be waiting for the lock (see `baton`).
        self._cond.release()
        try:
            with baton.released(), self._cond:
                self._cond.wait(min(left, cancel.POLL))
        finally:
            self._cond.acquire()
        cancel.check()

    def _too_long(self, wait: float, left: float) -> str:
        if self._asked:
            return (
                f"timeout: the model endpoint asked to retry after {seconds(wait)} "
                f"({self._reason}), which exceeds the {seconds(left)} left before the job's "
                "deadline"
            )
        return (
            f"timeout: the model call failed ({self._reason}) and the job's deadline leaves "
            "no time to retry"
        )


def backoff(failures: int) -> float:
    """Exponential backoff with jitter: about 1, 2, 4, ... s, never above the cap."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (failures - 1))
    return ceiling * random.uniform(0.5, 1.0)


def seconds(value: float) -> str:
    value = max(value, 0.0)
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"

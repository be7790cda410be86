"""What every worker of a run shares, in one threaded Ray actor pinned to the coordinator's
node (`Shared`, started by `Cluster.share`): the providers' `max_concurrency` slots, one
breaker per endpoint and key variable (never the key), the run's `Spend`, the call cache's
store (replies journalled on the coordinator's machine as they arrive), and which job runs
on which node.

No method blocks: a worker that must wait (a slot, a breaker's wait, a probe in flight) is
told so and waits on its own side, where its deadline runs. What a job holds (its slots, a
breaker's probe) is held in its name: when Ray runs the job again after its worker died
(`started` again) or the coordinator cancels it (`forget`), it is given back. Imported on
the coordinator and the workers alike: nothing here imports Ray."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_batch.agent.budget import Cap, Spend
from claw_batch.errors import ClawError, LimitExceeded, ModelError
from claw_batch.llm.breaker import Breaker, Ticket
from claw_batch.llm.callstore import CallStore

Slot = tuple[str | None, str | None]  # an endpoint: (base URL, the name of its key variable)


@dataclass(frozen=True)
class Refused:
    """A ClawError raised in the actor, sent back as a value (Ray would wrap the exception
    with the actor's traceback): the worker raises it again as itself."""

    kind: str  # "limit" | "model"
    message: str

    def error(self) -> ClawError:
        return LimitExceeded(self.message) if self.kind == "limit" else ModelError(self.message)


@dataclass(frozen=True)
class Stored:
    """A value in the cluster's object store (Cluster.put), read with Worker.get."""

    ref: Any


@dataclass(frozen=True)
class Wait:
    """Ask again after `seconds`."""

    seconds: float


class _Wait(Exception):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


def _raise_wait(seconds: float) -> None:
    raise _Wait(seconds)


class PolledBreaker(Breaker):
    """A Breaker whose waits are the caller's: instead of sleeping in the actor's thread
    (which a worker killed meanwhile would never hear back from), `admit` raises `_Wait`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock=clock, sleep=_raise_wait)

    def _await_probe(self, deadline: float) -> None:
        left = deadline - self._clock()
        if left <= 0:
            super()._await_probe(deadline)  # raises the timeout, with the endpoint's reason
        self._cond.release()
        try:
            raise _Wait(0.1)
        finally:
            self._cond.acquire()


def _refused(error: ClawError) -> Refused:
    return Refused("limit" if isinstance(error, LimitExceeded) else "model", str(error))


class Shared:
    """The actor's class (made remote by claw_batch.cluster.connect)."""

    def __init__(
        self,
        limits: Mapping[str, int],
        spend: Spend | None,
        cache_dir: str | None,
    ) -> None:
        self._lock = threading.Lock()
        self._limits = dict(limits)  # provider -> max_concurrency
        self._holders: dict[str, dict[str, int]] = {p: {} for p in limits}  # provider -> job -> n
        self._breakers: dict[Slot, PolledBreaker] = {}
        self._probes: dict[str, tuple[Slot, Ticket]] = {}  # job -> the probe it holds
        self._spend = spend
        self._held: dict[str, list[tuple[str, float]]] = {}  # job -> (task, estimate) held
        self._store = None if cache_dir is None else CallStore(Path(cache_dir))
        self._nodes: dict[str, str] = {}  # job -> node, while it runs

    # -- where jobs run
    def started(self, job: str, node: str) -> None:
        """A job (or Ray's new attempt of it) began on `node`: what an earlier attempt held
        is given back."""
        self.forget(job)
        with self._lock:
            self._nodes[job] = node

    def finished(self, job: str) -> None:
        self.forget(job)

    def forget(self, job: str) -> None:
        with self._lock:
            self._nodes.pop(job, None)
            for holders in self._holders.values():
                holders.pop(job, None)
            probe = self._probes.pop(job, None)
            held = self._held.pop(job, [])
        if probe is not None:
            self._breaker(probe[0]).abandoned(probe[1])
        if self._spend is not None:
            for task, estimate in held:
                self._spend.settle(task, estimate, None)

    def nodes(self) -> dict[str, str]:
        with self._lock:
            return dict(self._nodes)

    # -- max_concurrency
    def acquire(self, provider: str, job: str) -> bool:
        with self._lock:
            holders = self._holders.setdefault(provider, {})
            if sum(holders.values()) >= self._limits.get(provider, 1):
                return False
            holders[job] = holders.get(job, 0) + 1
            return True

    def release(self, provider: str, job: str) -> None:
        with self._lock:
            holders = self._holders.get(provider, {})
            if holders.get(job, 0) > 1:
                holders[job] -= 1
            else:
                holders.pop(job, None)

    # -- breakers
    def _breaker(self, slot: Slot) -> PolledBreaker:
        with self._lock:
            found = self._breakers.get(slot)
            if found is None:
                found = self._breakers[slot] = PolledBreaker()
            return found

    def admit(self, slot: Slot, model: str, left: float, job: str) -> Ticket | Wait | Refused:
        """`left`: seconds before the job's deadline (clocks differ between machines)."""
        try:
            ticket = self._breaker(slot).admit(model, time.monotonic() + left)
        except _Wait as wait:
            return Wait(wait.seconds)
        except (LimitExceeded, ModelError) as e:
            return _refused(e)
        if ticket.probe:
            with self._lock:
                self._probes[job] = (slot, ticket)
        return ticket

    def outcome(self, slot: Slot, job: str, ticket: Ticket, what: str, *args: Any) -> None:
        """succeeded / failed(reason, retry_after) / abandoned / broken(message, model)."""
        if ticket.probe:
            with self._lock:
                self._probes.pop(job, None)
        breaker = self._breaker(slot)
        if what == "succeeded":
            breaker.succeeded(ticket)
        elif what == "failed":
            breaker.failed(ticket, *args)
        else:
            breaker.abandoned(ticket)

    def broken(self, slot: Slot, message: str, model: str | None) -> None:
        self._breaker(slot).broken(message, model)

    # -- budgets
    def reserve(self, job: str, task: str, caps: list[Cap], estimate: float) -> Refused | None:
        if self._spend is None:
            return None
        try:
            self._spend.reserve(task, caps, estimate)
        except LimitExceeded as e:
            return _refused(e)
        with self._lock:
            self._held.setdefault(job, []).append((task, estimate))
        return None

    def settle(self, job: str, task: str, held: float, cost: float | None) -> None:
        if self._spend is None:
            return
        with self._lock:
            mine = self._held.get(job, [])
            if (task, held) in mine:
                mine.remove((task, held))
        self._spend.settle(task, held, cost)

    # -- the call cache
    def cache_get(self, key: str) -> dict[str, Any] | None:
        return None if self._store is None else self._store.get(key)

    def cache_put(self, key: str, reply: dict[str, Any], tokens: int) -> None:
        if self._store is not None:
            self._store.put(key, reply, tokens)

    def close(self) -> None:
        """The journal folded into calls.db; idempotent."""
        store, self._store = self._store, None
        if store is not None:
            store.close()

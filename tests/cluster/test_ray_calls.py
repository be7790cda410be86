"""RayCall.result gives back what its job held in the shared actor whenever it ends without a
value: a job Ray gave up on (its node lost for good: its worker's `finished` never ran), one
whose work raised, one cancelled. Otherwise its max_concurrency slot, its breaker probe and
its budget reservation outlived it, and every later job of that provider waited to its
deadline. A fake `ray` module drives a real `Shared` (no cluster needed)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from claw_batch import cancel
from claw_batch.agent.budget import Cap, Spend
from claw_batch.cluster.calls import RayCall
from claw_batch.cluster.shared import Shared
from claw_batch.config import Clawfile, Task
from claw_batch.errors import ClawfileError, TaskFailed


class _RayError(Exception):
    pass


class _TaskError(_RayError):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Cancelled(_RayError):
    pass


class FakeRay:
    """`ray.get` raises what Ray would have raised for the job."""

    class exceptions:
        RayError = _RayError
        RayTaskError = _TaskError
        TaskCancelledError = _Cancelled

    def __init__(self, error: BaseException | None = None, ready: bool = True) -> None:
        self.error, self.ready, self.cancelled = error, ready, False

    def wait(self, refs: Any, timeout: float) -> Any:
        return (refs, []) if self.ready else ([], refs)

    def get(self, ref: Any) -> Any:
        if self.error is not None:
            raise self.error
        return "value"

    def cancel(self, ref: Any, force: bool) -> None:
        self.cancelled = True


class Remote:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remote(self, *a: Any) -> Any:
        return self.fn(*a)


class Handle:
    """The actor's handle: each method's .remote runs it on the real Shared."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def __getattr__(self, name: str) -> Remote:
        return Remote(getattr(self.shared, name))


CAPS = [Cap("tasks.t.budget.per_day", "t", 1.5, "24 hours", 0.0)]


def holding(spend: Spend | None = None) -> Shared:
    """Job A mid-call: a slot of provider p (of 1), and (with `spend`) $1 reserved."""
    shared = Shared({"p": 1}, spend, None)
    shared.started("A", "node-1")
    assert shared.acquire("p", "A")
    assert shared.reserve("A", "t", CAPS, 1.0) is None
    return shared


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (_RayError("The node running this task died; retries exhausted"), TaskFailed),
        (_TaskError(RuntimeError("boom")), TaskFailed),
        (_TaskError(ClawfileError("clawfile.yaml: not here")), ClawfileError),
        (_Cancelled("cancelled"), KeyboardInterrupt),
    ],
)
def test_a_job_that_ends_without_a_value_gives_back_its_slot(
    error: BaseException, raised: type[BaseException]
) -> None:
    shared = holding()
    call: RayCall[Any] = RayCall(FakeRay(error), object(), "A", 0, Handle(shared))
    with pytest.raises(raised):
        call.result()
    assert shared.acquire("p", "B"), "A's slot is held for the rest of the run"
    assert shared.nodes() == {}


def test_a_job_lost_for_good_gives_back_its_budget_reservation() -> None:
    spend = Spend(Clawfile(tasks={"t": Task()}), lambda task, since: 0.0, dt.datetime(2026, 1, 1))
    shared = holding(spend)
    call: RayCall[Any] = RayCall(FakeRay(_RayError("lost")), object(), "A", 0, Handle(shared))
    with pytest.raises(TaskFailed):
        call.result()
    # $1 of $1.5 was held for A: B's $1 fits only once A's reservation is given back.
    assert shared.reserve("B", "t", CAPS, 1.0) is None


def test_ctrl_c_while_waiting_gives_back_once(monkeypatch: pytest.MonkeyPatch) -> None:
    shared = holding()
    forgot: list[str] = []
    real = shared.forget
    monkeypatch.setattr(shared, "forget", lambda job: (forgot.append(job), real(job)))
    monkeypatch.setattr(cancel, "cancelled", lambda: True)
    ray = FakeRay(ready=False)
    call: RayCall[Any] = RayCall(ray, object(), "A", 0, Handle(shared))
    with pytest.raises(KeyboardInterrupt):
        call.result()
    assert ray.cancelled
    assert forgot == ["A"]
    assert shared.acquire("p", "B")


def test_a_value_leaves_the_giving_back_to_the_worker() -> None:
    """The worker's `finished` gives back what the job held; the coordinator asks nothing."""
    shared = holding()
    call: RayCall[Any] = RayCall(FakeRay(), object(), "A", 0, Handle(shared))
    assert call.result() == "value"
    assert not shared.acquire("p", "B")

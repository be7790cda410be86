"""What a run may spend, checked before every model call.

A job's own limits are `budget.max_tokens` and `budget.max_usd`; across runs, a task's
`budget.per_day` / `budget.per_week` and the clawfile-wide `budget:` cap the USD spent in the
last 24 hours / 7 days: what the ledger records (the jobs of earlier runs) plus what this
run's jobs have spent and are about to. The next call is estimated from its prompt (4
characters a token) and its answer as long as the job's longest so far (what it answers is
only known after: a limit can be passed by the part of one answer that is longer), and the
job stops with a limit before a call that would cross one. Jobs run in threads: the
estimate of a call in flight is held against the caps until its cost is known, so parallel
jobs cannot all pass the same last dollar.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from claw_batch.config import Budget, Clawfile, Price
from claw_batch.errors import ClawfileError, LimitExceeded
from claw_batch.llm import prices
from claw_batch.llm.usage import Usage

WINDOWS = {"per_day": ("24 hours", dt.timedelta(days=1)), "per_week": ("7 days", dt.timedelta(7))}

# USD spent by the jobs of the ledger started since a time: (task or None for all, since).
SpentSince = Callable[[str | None, dt.datetime], float]


@dataclass(frozen=True)
class Cap:
    key: str  # where the clawfile sets it: tasks.T.budget.per_day, budget.per_week
    task: str | None  # None: every task together
    usd: float
    period: str  # "24 hours"
    spent_before: float  # by earlier runs, in the period


class Spend:
    """One run's spending, shared by its jobs."""

    def __init__(self, config: Clawfile, spent_since: SpentSince, now: dt.datetime) -> None:
        """Reads what earlier runs spent from the ledger now, before any job of this run
        is written to it."""
        self.config = config
        self._lock = threading.Lock()
        shared = self._caps_of(config.budget, None, "budget", spent_since, now)
        self._caps = {  # per task
            name: self._caps_of(task.budget, name, f"tasks.{name}.budget", spent_since, now)
            + shared
            for name, task in config.tasks.items()
        }
        self._spent: dict[str, float] = {}  # per task, by this run's calls
        self._held: dict[str, float] = {}  # per task, estimates of calls in flight
        # per task, by (and held for) the calls of its jobs' sub-jobs of other tasks
        self._via_spent: dict[str, float] = {}
        self._via_held: dict[str, float] = {}

    def __getstate__(self) -> dict[str, object]:
        """Picklable (a cluster's shared actor holds the run's Spend): without the lock."""
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def job(self, task: str, model: str, *, batch: bool = False) -> JobBudget:
        """The budget of one job of `task` calling `model` (as the clawfile names it);
        `batch`: through the provider's Batch API, at its price."""
        config = self.config.tasks[task]
        price = prices.lookup(model, self.config.prices, batch=batch)
        caps = self._caps[task]
        budget = config.budget or Budget()
        if price is None and (caps or budget.max_usd is not None):
            raise ClawfileError(
                f"task {task!r} has a budget in USD, and no price is known for model "
                f"{model!r}: add it under prices: in the clawfile (USD per million tokens, "
                "e.g. {input: 0.5, output: 1.5}; 0 for a local model)"
            )
        return JobBudget(self, task, price, budget, caps)

    @staticmethod
    def _caps_of(
        budget: Budget | None,
        task: str | None,
        where: str,
        spent_since: SpentSince,
        now: dt.datetime,
    ) -> list[Cap]:
        caps = []
        for name, (period, length) in WINDOWS.items():
            usd = getattr(budget, name, None)
            if usd is not None:
                spent = spent_since(task, now - length)
                caps.append(Cap(f"{where}.{name}", task, usd, period, spent))
        return caps

    def _in_run(self, table: Mapping[str, float], task: str | None) -> float:
        return sum(v for t, v in table.items() if task is None or t == task)

    def _spent_on(self, cap: Cap) -> float:
        spent = cap.spent_before + self._in_run(self._spent, cap.task)
        spent += self._in_run(self._held, cap.task)
        if cap.task is not None:  # and what sub-jobs of its jobs spend (of other tasks)
            spent += self._via_spent.get(cap.task, 0.0) + self._via_held.get(cap.task, 0.0)
        return spent

    def reserve(
        self, task: str, caps: list[Cap], estimate: float, via: tuple[str, ...] = ()
    ) -> None:
        """Hold `estimate` USD for a call, or raise the limit it would cross; `via`: the
        tasks of a sub-job's ancestors, whose own caps (not the shared ones, which count the
        call under `task` already) hold it too."""
        with self._lock:
            checked = list(caps) + [c for t in via for c in self._caps.get(t, []) if c.task == t]
            for cap in checked:
                spent = self._spent_on(cap)
                if spent + estimate > cap.usd:
                    scope = f"task {cap.task!r}" if cap.task else "all tasks together"
                    raise LimitExceeded(
                        f"budget: the next model call (~${estimate:.4f}) would take {scope} "
                        f"past {cap.key} of ${cap.usd:.2f} (${spent:.4f} spent in the last "
                        f"{cap.period})"
                    )
            self._held[task] = self._held.get(task, 0.0) + estimate
            for t in via:
                self._via_held[t] = self._via_held.get(t, 0.0) + estimate

    def settle(self, task: str, held: float, cost: float | None, via: tuple[str, ...] = ()) -> None:
        with self._lock:
            self._held[task] = self._held.get(task, 0.0) - held
            self._spent[task] = self._spent.get(task, 0.0) + (cost or 0.0)
            for t in via:
                self._via_held[t] = self._via_held.get(t, 0.0) - held
                self._via_spent[t] = self._via_spent.get(t, 0.0) + (cost or 0.0)


class JobBudget:
    """One job's limits and what it has spent; `reserve` before each model call, `settle`
    with the call's usage after it (an empty usage when the call failed)."""

    def __init__(
        self,
        spend: Spend | None,
        task: str,
        price: Price | None,
        budget: Budget,
        caps: list[Cap],
    ) -> None:
        self.spend = spend
        self.task = task
        self.price = price
        self.budget = budget
        self.caps = caps
        self.cost: float | None = None if price is None else 0.0  # None: price unknown
        self._held = 0.0
        self._longest_answer = 0  # completion tokens: the next answer is taken to be as long
        # A sub-job's (`delegate`): the budget of the job that started it, which what this
        # one spends is charged to and whose limits it must stay within too (`within`).
        self.parent: JobBudget | None = None
        self.tokens = 0  # spent by the job's own calls
        self.sub_tokens = 0  # by its sub-jobs' calls: counted against its max_tokens
        self._lock = threading.Lock()  # sub-jobs in parallel charge it from their threads
        self._sub_held = (0, 0.0)  # tokens, USD: estimates of its sub-jobs' calls in flight
        self._via: tuple[str, ...] = ()  # the tasks its call is held on too (Spend.reserve)
        self._holds: tuple[int, float] = (0, 0.0)  # what its call in flight holds on parents
        self._costliest_sub_call = 0.0  # USD: a sub-job's next call is taken to cost as much

    @classmethod
    def tokens_only(cls, max_tokens: int | None = None) -> JobBudget:
        """A job with no price and no caps in USD (tests; a loop outside a run)."""
        return cls(None, "", None, Budget(max_tokens=max_tokens), [])

    def within(self, parent: JobBudget) -> JobBudget:
        """This budget as a sub-job's: what it spends is the parent's too, and it stops
        before a call that would take the parent past its own limits."""
        self.parent = parent
        return self

    def reserve(self, used: Usage, prompt_tokens: int) -> None:
        b = self.budget
        if b.max_tokens is not None and used.total_tokens + prompt_tokens > b.max_tokens - (
            self.sub_tokens
        ):
            raise LimitExceeded(
                f"budget: the next model call (~{prompt_tokens:,} prompt tokens) would take "
                f"the job past its budget of {b.max_tokens:,} tokens "
                f"({used.total_tokens:,} used)"
            )
        estimate = self._estimate(prompt_tokens)
        if self.price is not None:
            with self._lock:
                spent = self.cost or 0.0
            if b.max_usd is not None and spent + estimate > b.max_usd:
                raise LimitExceeded(
                    f"budget: the next model call (~${estimate:.4f}) would take the job past "
                    f"its budget.max_usd of ${b.max_usd:.2f} (${spent:.4f} spent)"
                )
        parents = self._parents()
        # A sub-job's first call has no answer to go by: its siblings' calls are taken as like it
        estimate = max([estimate, *(p.costliest_sub_call() for p in parents)])
        held: list[JobBudget] = []
        try:
            for parent in parents:  # held on each until the call is settled
                parent.hold(prompt_tokens, estimate)
                held.append(parent)
            via = tuple(dict.fromkeys(p.task for p in parents if p.task != self.task))
            if self.spend is not None and self.price is not None and (self.caps or via):
                self.spend.reserve(self.task, self.caps, estimate, via)
                self._held, self._via = estimate, via
        except BaseException:
            for parent in held:
                parent.release(prompt_tokens, estimate)
            raise
        self._holds = (prompt_tokens, estimate)

    def _parents(self) -> list[JobBudget]:
        parents, parent = [], self.parent
        while parent is not None:
            parents.append(parent)
            parent = parent.parent
        return parents

    def _estimate(self, prompt_tokens: int) -> float:
        if self.price is None:
            return 0.0
        return prices.cost(Usage(prompt_tokens, self._longest_answer, 0), self.price) or 0.0

    def hold(self, prompt_tokens: int, estimate: float) -> None:
        """Hold a sub-job's next call (~`prompt_tokens`, ~`estimate` USD) against this job's
        limits, with its other sub-jobs' calls in flight; or raise the limit it would cross."""
        b = self.budget
        with self._lock:
            held_tokens, held_usd = self._sub_held
            tokens = self.tokens + self.sub_tokens + held_tokens
            cost = (self.cost or 0.0) + held_usd
            if b.max_tokens is not None and tokens + prompt_tokens > b.max_tokens:
                raise LimitExceeded(
                    f"budget: the next model call (~{prompt_tokens:,} prompt tokens) would take "
                    f"the parent job past its budget of {b.max_tokens:,} tokens "
                    f"({tokens:,} used by it and its sub-jobs)"
                )
            if b.max_usd is not None and cost + estimate > b.max_usd:
                raise LimitExceeded(
                    f"budget: the next model call (~${estimate:.4f}) would take the parent job "
                    f"past its budget.max_usd of ${b.max_usd:.2f} (${cost:.4f} spent by it and "
                    "its sub-jobs)"
                )
            self._sub_held = (held_tokens + prompt_tokens, held_usd + estimate)

    def costliest_sub_call(self) -> float:
        with self._lock:
            return self._costliest_sub_call

    def release(self, prompt_tokens: int, estimate: float) -> None:
        with self._lock:
            held_tokens, held_usd = self._sub_held
            self._sub_held = (held_tokens - prompt_tokens, held_usd - estimate)

    def charge(self, tokens: int, cost: float | None) -> None:
        """A sub-job's call, charged to this job."""
        with self._lock:
            self.sub_tokens += tokens
            if cost is not None:
                self.cost = (self.cost or 0.0) + cost
                self._costliest_sub_call = max(self._costliest_sub_call, cost)

    def priced(self, usage: Usage) -> float | None:
        """What `usage` would cost the job (None: price unknown); nothing is spent."""
        return prices.cost(usage, self.price)

    def settle(self, usage: Usage) -> float | None:
        """The call's cost (None: price unknown), added to the job's and the run's."""
        cost = prices.cost(usage, self.price)
        self._longest_answer = max(self._longest_answer, usage.completion_tokens)
        with self._lock:
            self.tokens += usage.total_tokens
            if cost is not None:
                self.cost = (self.cost or 0.0) + cost
        for parent in self._parents():
            parent.charge(usage.total_tokens, cost)
            parent.release(*self._holds)
        if self.spend is not None:
            self.spend.settle(self.task, self._held, cost, self._via)
        self._held, self._via, self._holds = 0.0, (), (0, 0.0)
        return cost

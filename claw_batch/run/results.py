"""What became of a job, and of a run: the values the scheduler, the summary and the
reports share."""

from __future__ import annotations

import marshal
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal, NamedTuple

from claw_batch.lazy import Lazy
from claw_batch.llm.usage import Usage
from claw_batch.plan.jobs import Job

Status = Literal[
    # The job ran.
    "ok",
    "failed",
    "limit",
    "interrupted",
    # Its upstream failed.
    "skipped",
    # It did not need to run.
    "up-to-date",
    "modified",
    # A dry run (-n, `claw plan`).
    "would-run",
    # What stopped the run stopped it too: only its row in the ledger says so.
    "error",
]
NOT_RUN: frozenset[Status] = frozenset({"up-to-date", "modified", "skipped", "would-run"})


NO_USAGE = Usage()


# A named tuple, not a frozen dataclass: one per job, 100,000 in a no-op, and a tuple is
# made in a quarter of the time a frozen dataclass's __init__ takes (one setattr a field).
class JobResult(NamedTuple):
    job: Job
    status: Status
    reason: str | None
    duration_s: float
    usage: Usage
    output: str | None
    error: str | None
    transcript: str
    text: str = ""
    findings: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()  # why it ran, or why it did not
    cost_usd: float | None = None  # None: nothing was spent, or the model's price is unknown
    prompt_estimate: int | None = None  # a dry run's estimate of its first call's prompt
    # A failed check's verdict given again (nothing it reads changed): whose verdict it is
    # ("the verdict of run X at T"), and how to ask the model again.
    remembered: str | None = None
    again: str | None = None
    # What the turns the call cache replayed would have cost (None: none, or price unknown).
    saved_tokens: int = 0
    saved_usd: float | None = None
    node: str | None = None  # the cluster node it ran on (--executor ray); None: here
    # What its sub-jobs (`delegate`) spent: part of `usage` and `cost_usd`, which are what
    # the job cost with them; its ledger row holds its own calls (`own_usage`), theirs theirs.
    sub_usage: Usage = NO_USAGE
    sub_cost_usd: float | None = None

    @property
    def tokens(self) -> int:
        return self.usage.total_tokens

    @property
    def own_usage(self) -> Usage:
        u, sub = self.usage, self.sub_usage
        return Usage(
            u.prompt_tokens - sub.prompt_tokens,
            u.completion_tokens - sub.completion_tokens,
            u.cached_tokens - sub.cached_tokens,
        )

    @property
    def own_cost_usd(self) -> float | None:
        if self.cost_usd is None or self.sub_cost_usd is None:
            return self.cost_usd
        return round(self.cost_usd - self.sub_cost_usd, 12)


def spent(tally: Any) -> dict[str, Any]:
    """A JobResult's usage and cost from a job's tally (run.jobsink.Tally): its own calls'
    and its sub-jobs'."""
    own, sub = tally.cost_usd, tally.sub_cost_usd
    cost = own if sub is None else (own or 0.0) + sub
    return {
        "usage": tally.usage + tally.sub_usage,
        "cost_usd": cost,
        "sub_usage": tally.sub_usage,
        "sub_cost_usd": sub,
    }


def not_run(
    job: Job, status: Status, reasons: tuple[str, ...], output: str | None = None
) -> JobResult:
    reason = reasons[0] if reasons else None
    error = reason if status == "skipped" else None
    return JobResult(job, status, reason, 0.0, NO_USAGE, output, error, "", reasons=reasons)


class UpToDate(Lazy[JobResult]):
    """The results of a task's jobs found up to date together (a no-op's 100,000): each
    made when it is read, from the job and the output its result names."""

    def __init__(self, jobs: Sequence[Job], outputs: Sequence[str | None]) -> None:
        super().__init__(len(jobs), lambda i: not_run(jobs[i], "up-to-date", (), outputs[i]))
        self.jobs = jobs
        self.outputs = outputs

    def __iter__(self) -> Iterator[JobResult]:
        for job, output in zip(self.jobs, self.outputs, strict=True):
            yield not_run(job, "up-to-date", (), output)


SPILL = 4096  # results held before they go to disk, together


class Results:
    """A run's job results, in the order they ended. A run of 100,000 jobs does not hold
    them: past SPILL they go to an unnamed temporary file, SPILL at a time (marshal: a tuple
    of plain values each), and come back one at a time each time they are read. A block of
    up-to-date jobs (UpToDate) is kept as it is, in its place: it holds no more than its jobs
    and their outputs."""

    def __init__(self, results: Iterable[JobResult] = ()) -> None:
        self._held: list[JobResult] = []
        self._file: IO[bytes] | None = None
        # In order: where each batch is in the file and its size, or a block.
        self._batches: list[tuple[int, int] | UpToDate] = []
        self._count = 0
        self.statuses: set[Status] = set()  # of every result
        self._spills = True  # False once a spill failed: the rest are held
        self.extend(results)

    def extend(self, results: Iterable[JobResult]) -> None:
        if isinstance(results, UpToDate):
            if results:
                self._block(results)
            return
        for r in results:
            self.append(r)

    def _block(self, block: UpToDate) -> None:
        if self._held and self._spills:
            self._spill()  # what came before it, before it
        if self._held:  # held since a spill failed: the block goes with them
            self._held.extend(block)
        else:
            self._batches.append(block)
        self._count += len(block)
        self.statuses.add("up-to-date")

    def append(self, result: JobResult) -> None:
        self._held.append(result)
        self._count += 1
        self.statuses.add(result.status)
        if len(self._held) >= SPILL and self._spills:
            self._spill()

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[JobResult]:
        spilled, held = list(self._batches), list(self._held)  # as they are now
        for batch in spilled:
            if isinstance(batch, UpToDate):
                yield from batch
                continue
            start, size = batch
            assert self._file is not None
            self._file.seek(start)
            yield from map(_result, marshal.loads(self._file.read(size)))
        yield from held

    def _spill(self) -> None:
        """The held results to the file; where that cannot be (no room in the temporary
        folder, a value marshal cannot write), they stay held, and so do later ones."""
        try:
            if self._file is None:
                import tempfile
                import weakref

                self._file = tempfile.TemporaryFile()  # noqa: SIM115 (open while the results are)
                weakref.finalize(self, self._file.close)
            data = marshal.dumps([_row(r) for r in self._held])
            start = self._file.seek(0, 2)
            self._file.write(data)
            self._file.flush()
        except (OSError, ValueError):
            self._spills = False
            return
        self._batches.append((start, len(data)))
        self._held = []


def _row(r: JobResult) -> tuple[object, ...]:
    job, u = r.job, r.usage
    # fmt: off
    return (
        job.task, job.item, r.status, r.reason, r.duration_s,
        u.prompt_tokens, u.completion_tokens, u.cached_tokens,
        r.output, r.error, r.transcript, r.text, r.findings, r.reasons, r.cost_usd,
        r.prompt_estimate, r.remembered, r.again, r.saved_tokens, r.saved_usd,
    )
    # fmt: on


def _result(row: tuple[Any, ...]) -> JobResult:
    task, item, status, reason, duration, prompt, completion, cached, *rest = row
    usage = Usage(prompt, completion, cached) if prompt or completion or cached else NO_USAGE
    return JobResult(Job(task, item), status, reason, duration, usage, *rest)


# What the ledger calls a run that ended with each exit code (SPEC §7).
RUN_STATUS = {0: "ok", 1: "failed", 2: "error", 3: "limit", 130: "interrupted"}


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    results: Results = field(default_factory=Results)
    exit_code: int = 0
    error: str | None = None  # what stopped the run early (a replay miss, a template error)

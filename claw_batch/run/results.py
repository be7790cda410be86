"""What became of a job, and of a run: the values the scheduler, the summary and the
reports share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

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

    @property
    def tokens(self) -> int:
        return self.usage.total_tokens


def not_run(
    job: Job, status: Status, reasons: tuple[str, ...], output: str | None = None
) -> JobResult:
    reason = reasons[0] if reasons else None
    error = reason if status == "skipped" else None
    return JobResult(job, status, reason, 0.0, NO_USAGE, output, error, "", reasons=reasons)


# What the ledger calls a run that ended with each exit code (SPEC §7).
RUN_STATUS = {0: "ok", 1: "failed", 2: "error", 3: "limit", 130: "interrupted"}


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    results: list[JobResult] = field(default_factory=list)
    exit_code: int = 0
    error: str | None = None  # what stopped the run early (a replay miss, a template error)

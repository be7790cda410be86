"""What became of a job: the value the scheduler, the summary and the reports share."""

from __future__ import annotations

from dataclasses import dataclass

from claw_batch.llm.usage import Usage
from claw_batch.plan.jobs import Job

# ok | failed | limit | interrupted : the job ran.   skipped : its upstream failed.
# up-to-date | modified : it did not need to run.   would-run : dry run (-n / plan).
NOT_RUN = frozenset({"up-to-date", "modified", "skipped", "would-run"})


NO_USAGE = Usage()


@dataclass(frozen=True)
class JobResult:
    job: Job
    status: str
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

    @property
    def tokens(self) -> int:
        return self.usage.total_tokens


def not_run(
    job: Job, status: str, reasons: tuple[str, ...], output: str | None = None
) -> JobResult:
    reason = reasons[0] if reasons else None
    error = reason if status == "skipped" else None
    return JobResult(job, status, reason, 0.0, NO_USAGE, output, error, "", reasons=reasons)

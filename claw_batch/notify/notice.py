"""What one delivery says: a task's outcome in one run (one message per task per run, however
many jobs it fanned out to). claw_batch.run.notices makes it from the run's results;
claw_batch.notify.send shapes it for each target. Everything in it is already redacted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from claw_batch.notify.markup import cut, cut_bytes


@dataclass(frozen=True)
class Failure:
    """A job of the task that did not end ok."""

    item: str  # "" for a task of one job
    status: str  # failed | limit | interrupted
    reason: str | None
    error: str | None


@dataclass(frozen=True)
class Notice:
    task: str
    event: str  # what fired it: failed | limit | ok | changed ("always" fires with the status)
    status: str  # the task's outcome: ok | failed | limit | interrupted (the worst of its jobs)
    run_id: str
    project: str  # the project's folder name
    jobs: int  # jobs of the task that ran in this run
    counts: Mapping[str, int] = field(default_factory=dict)  # status -> jobs
    failures: tuple[Failure, ...] = ()  # at most FAILURES_SHOWN, then `more_failures`
    more_failures: int = 0
    item: str | None = None  # a task of one job run for one item (a watch file)
    reason: str | None = None  # the one job's, or the first failure's
    output: str | None = None  # project-relative; a fan-out: the first job's
    excerpt: str = ""  # the output's first lines, or all of it up to EXCERPT_BYTES
    excerpt_cut: bool = False  # the output is longer than the excerpt
    tokens: int = 0
    cost_usd: float | None = None
    duration_s: float = 0.0
    tainted: bool = False  # the output came from a job that read outside content
    show: str = ""  # the command that shows the transcript(s): `claw show TASK`
    sample: bool = False  # `claw notify test`: not a real outcome

    def as_json(self) -> dict[str, Any]:
        """The payload as JSON (a `format: json` webhook's body, a command's stdin), every
        field present (null when unknown), the free texts bounded."""
        return {
            "task": self.task,
            "event": self.event,
            "status": self.status,
            "item": self.item,
            "reason": self.reason,
            "jobs": self.jobs,
            "counts": dict(sorted(self.counts.items())),
            "failures": [
                {
                    "item": f.item,
                    "status": f.status,
                    "reason": f.reason,
                    "error": None if f.error is None else cut(f.error, ERROR_CHARS),
                }
                for f in self.failures
            ],
            "more_failures": self.more_failures,
            "output": self.output,
            "excerpt": cut_bytes(self.excerpt, EXCERPT_BYTES),
            "excerpt_cut": self.excerpt_cut or len(self.excerpt.encode()) > EXCERPT_BYTES,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "duration_s": self.duration_s,
            "run_id": self.run_id,
            "show": self.show,
            "tainted": self.tainted,
            "project": self.project,
            "sample": self.sample,
        }


FAILURES_SHOWN = 20
EXCERPT_LINES = 20
EXCERPT_BYTES = 4000
ERROR_CHARS = 1000  # a failure's error, in every shape

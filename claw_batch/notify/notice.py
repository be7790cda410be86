"""What one delivery says: a task's outcome in one run (one message per task per run, however
many jobs it fanned out to). claw_batch.run.notices makes it from the run's results;
claw_batch.notify.send shapes it for each target. Everything in it is already redacted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
        """The payload as JSON (a `format: json` webhook's body, a command's stdin)."""
        raise NotImplementedError  # claw_batch.notify (part A)


FAILURES_SHOWN = 20
EXCERPT_LINES = 20
EXCERPT_BYTES = 4000

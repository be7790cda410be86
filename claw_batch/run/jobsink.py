"""Where one running job's events go (its transcript, the ledger's calls, the progress
display), and its transcript's name."""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from claw_batch.llm.messages import Usage
from claw_batch.plan.jobs import Job
from claw_batch.store.state import State
from claw_batch.store.transcript import Transcript
from claw_batch.terminal.progress import Progress


class Tally:
    """What a job's events add up to: its usage and cost as calls happen (so that a failed
    job still counts its tokens), and what the call cache saved it."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.cost_usd: float | None = None  # None: no call, or the model's price is unknown
        # What the turns the call cache answered would have cost: tokens, USD (None: none,
        # or the price is unknown).
        self.saved_tokens = 0
        self.saved_usd: float | None = None
        # What its sub-jobs (`delegate`) spent, their own sub-jobs' too: not in `usage`.
        self.sub_usage = Usage()
        self.sub_cost_usd: float | None = None

    def count(self, kind: str, fields: dict[str, Any]) -> bool:
        """Add an event; True when it is a model call that was paid (the ledger's `calls`)."""
        if kind == "assistant" and fields.get("replayed"):  # nothing paid: not in `calls`
            u = fields["usage"]
            self.saved_tokens += u["prompt"] + u["completion"]
            cost = fields.get("cost_usd")
            if cost is not None:
                self.saved_usd = (self.saved_usd or 0.0) + cost
            return False
        if kind == "assistant":
            u = fields["usage"]
            self.usage += Usage(u["prompt"], u["completion"], u["cached"])
            cost = fields.get("cost_usd")
            if cost is not None:
                self.cost_usd = (self.cost_usd or 0.0) + cost
            return True
        if kind == "delegate" and "usage" in fields:  # a sub-job that ran
            u = fields["usage"]
            self.sub_usage += Usage(u["prompt"], u["completion"], u["cached"])
            cost = fields.get("cost_usd")
            if cost is not None:
                self.sub_cost_usd = (self.sub_cost_usd or 0.0) + cost
        return False


class EventSink(Protocol):
    """Where a running job's events go (a JobSink here; shipped.Buffered on a worker)."""

    usage: Usage
    cost_usd: float | None
    saved_tokens: int
    saved_usd: float | None
    sub_usage: Usage
    sub_cost_usd: float | None

    def __call__(self, kind: str, **fields: Any) -> None: ...

    def flush(self) -> None: ...


class JobSink(Tally):
    """Where one job's events go: its transcript, the ledger's calls, the progress display.
    It sums the usage as calls happen, so that a failed job still counts its tokens."""

    def __init__(
        self, job: Job, transcript: Transcript, state: State, run_id: str, progress: Progress
    ) -> None:
        super().__init__()
        self.job = job
        self.transcript = transcript
        self.state = state
        self.run_id = run_id
        self.progress = progress

    def __call__(self, kind: str, **fields: Any) -> None:
        self.transcript.event(kind, **fields)
        if self.count(kind, fields):
            u = fields["usage"]
            self.state.record_call(
                self.run_id,
                self.job.task,
                self.job.item or "",
                fields["step"],
                fields["model"],
                u,
                fields["seconds"],
                fields.get("cost_usd"),
            )
        if self.progress.shows(kind):  # most events, and every one in a log, show nothing
            # -v prints the start of tool calls and errors: redacted before anything cuts them
            self.progress.job_event(self.job, kind, self.transcript.redact.deep(fields))

    def flush(self) -> None:
        """Called before each model call: the turn so far goes to disk (see Transcript)."""
        self.transcript.flush()


def transcript_name(job: Job) -> str:
    """A file name per job; fan-out items get a hash so that similar names never collide."""
    safe = "".join(c if c.isalnum() or c in "-_.[]" else "_" for c in job.name)[:120]
    if job.item is None:
        return f"{safe}.jsonl"
    digest = hashlib.sha256(job.item.encode()).hexdigest()[:8]
    return f"{safe}-{digest}.jsonl"

"""`claw run`: select the jobs, run each through the tool loop, record what happened."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import secrets as _secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claw_batch import notes
from claw_batch.atomic import write_atomic
from claw_batch.childenv import scrubbed_env
from claw_batch.clawfile import Project
from claw_batch.context import daily_note_path
from claw_batch.endpoints import Mode, Models, api_keys
from claw_batch.errors import ClawError, Interrupted, LimitExceeded, TaskFailed, UsageError
from claw_batch.execute import JobExecution, Outcome, RunContext
from claw_batch.jobs import Job, expand, select_tasks, with_needs
from claw_batch.messages import Usage
from claw_batch.progress import Progress
from claw_batch.redact import Redactor, secrets_from_env
from claw_batch.render import Upstream
from claw_batch.report import envelope
from claw_batch.state import JobRecord, State
from claw_batch.transcript import Transcript


@dataclass(frozen=True)
class RunOptions:
    targets: tuple[str, ...] = ()
    keep_going: bool = False
    files: tuple[str, ...] = ()
    model: str | None = None
    mode: Mode = field(default_factory=Mode)
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobResult:
    job: Job
    status: str  # ok | failed | limit | interrupted | skipped
    reason: str | None
    duration_s: float
    usage: Usage
    output: str | None
    error: str | None
    transcript: str
    text: str = ""
    findings: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        return self.usage.total_tokens


@dataclass
class RunSummary:
    run_id: str
    results: list[JobResult] = field(default_factory=list)
    exit_code: int = 0
    error: str | None = None  # what stopped the run early (a replay miss, a template error)


# The ledger's word for each exit code.
RUN_STATUS = {0: "ok", 1: "failed", 2: "error", 3: "limit", 130: "interrupted"}


def now_for_run(environ: Mapping[str, str]) -> dt.datetime:
    """The run's clock; CLAW_NOW (ISO 8601) pins it for reproducible demos and tests."""
    pinned = environ.get("CLAW_NOW")
    if pinned:
        try:
            when = dt.datetime.fromisoformat(pinned)
        except ValueError:
            raise UsageError(
                f"CLAW_NOW={pinned!r} is not an ISO 8601 time (e.g. 2026-11-22T23:00:00+01:00)"
            ) from None
        return when if when.tzinfo else when.astimezone()
    return dt.datetime.now().astimezone()


def new_run_id(now: dt.datetime) -> str:
    return now.strftime("%Y%m%d-%H%M%S-") + _secrets.token_hex(3)


def exit_code(results: Sequence[JobResult]) -> int:
    statuses = {r.status for r in results}
    if "interrupted" in statuses:
        return Interrupted.exit_code
    if "failed" in statuses:
        return TaskFailed.exit_code
    if "limit" in statuses:
        return LimitExceeded.exit_code
    return 0


class Runner:
    def __init__(
        self,
        project: Project,
        options: RunOptions,
        *,
        progress: Progress,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.project = project
        self.options = options
        self.progress = progress
        self.environ = dict(os.environ if environ is None else environ)
        secrets = [*api_keys(project.config, self.environ), *secrets_from_env(self.environ)]
        self.redact = Redactor(secrets)
        self.models = Models(project.config, self.environ, options.mode, redact=self.redact)

    def plan(self) -> list[Job]:
        config = self.project.config
        names = with_needs(config, select_tasks(config, self.options.targets))
        return [job for name in names for job in expand(config, self.project.root, name)]

    def run(self) -> RunSummary:
        """Run the planned jobs. Errors that stop the run (a replay miss, a template error,
        Ctrl-C) end up in the summary; only a bug propagates."""
        jobs = self.plan()
        now = now_for_run(self.environ)
        summary = RunSummary(new_run_id(now))
        run_dir = self.project.root / ".claw" / "runs" / summary.run_id
        state = State(self.project.root / ".claw" / "state.db")
        state.begin_run(summary.run_id, now.isoformat(), " ".join(self.options.argv))
        ctx = RunContext(
            project=self.project,
            models=self.models,
            now=now,
            env=scrubbed_env(),
            files=self.options.files,
            model_override=self.options.model,
        )
        summary.exit_code = 1  # what the ledger says if a bug ends the run
        try:
            self._run_jobs(jobs, ctx, state, run_dir, summary)
            summary.exit_code = exit_code(summary.results)
        except ClawError as e:
            summary.exit_code, summary.error = e.exit_code, self.redact(str(e))
        finally:
            finished = now_for_run(self.environ).isoformat()
            status = RUN_STATUS.get(summary.exit_code, "error")
            state.end_run(summary.run_id, finished, status, summary.exit_code)
            state.close()
            if run_dir.is_dir():
                write_atomic(run_dir / "summary.json", json.dumps(envelope(summary), indent=2))
        return summary

    def _run_jobs(
        self, jobs: list[Job], ctx: RunContext, state: State, run_dir: Path, summary: RunSummary
    ) -> None:
        failed_tasks: set[str] = set()
        for job in jobs:
            blocked = [n for n in self.project.config.tasks[job.task].needs if n in failed_tasks]
            if blocked:
                result = skipped(job, f"needs {', '.join(blocked)}, which failed")
                self.progress.job_finished(result)
            else:
                result = self._run_one(job, ctx, state, run_dir)
            summary.results.append(result)
            if result.status == "interrupted":
                raise Interrupted("interrupted")
            if result.status != "ok":
                failed_tasks.add(job.task)
                if not self.options.keep_going:
                    return

    def _run_one(self, job: Job, ctx: RunContext, state: State, run_dir: Path) -> JobResult:
        started_wall = now_for_run(self.environ)
        state.start_job(run_dir.name, job.task, job.item or "", started_wall.isoformat())
        transcript = Transcript(run_dir / transcript_name(job), self.redact)
        sink = JobSink(job, transcript, state, run_dir.name, self.progress)
        sink("start", job=job.name, task=job.task, item=job.item)
        self.progress.job_started(job)
        started = time.monotonic()
        try:
            outcome, status, reason, error = _attempt(ctx, job, sink)
        except Exception as e:  # it stops the run: close the job's records first
            message = self.redact(str(e))
            transcript.event("end", status="error", error=message)
            transcript.close()
            state.finish_job(
                JobRecord(
                    run_dir.name,
                    job.task,
                    job.item or "",
                    "error",
                    type(e).__name__,
                    started_wall.isoformat(),
                    round(time.monotonic() - started, 3),
                    sink.usage.prompt_tokens,
                    sink.usage.completion_tokens,
                    sink.usage.cached_tokens,
                    None,
                    None,
                    message,
                    transcript.path.relative_to(self.project.root).as_posix(),
                )
            )
            raise
        result = JobResult(
            job=job,
            status=status,
            reason=reason,
            duration_s=round(time.monotonic() - started, 3),
            usage=sink.usage,
            output=outcome.output if outcome else None,
            error=self.redact(error) if error else None,
            transcript=transcript.path.relative_to(self.project.root).as_posix(),
            text=outcome.text if outcome else "",
            findings=tuple(self.redact(f) for f in _findings(outcome)),
        )
        transcript.event(
            "end", status=status, reason=reason, error=result.error, seconds=result.duration_s
        )
        transcript.close()
        self._record(state, run_dir.name, result, started_wall)
        self.progress.job_finished(result)
        return result

    def _record(self, state: State, run_id: str, r: JobResult, started: dt.datetime) -> None:
        state.finish_job(
            JobRecord(
                run_id=run_id,
                task=r.job.task,
                item=r.job.item or "",
                status=r.status,
                reason=r.reason,
                started=started.isoformat(),
                duration_s=r.duration_s,
                prompt_tokens=r.usage.prompt_tokens,
                completion_tokens=r.usage.completion_tokens,
                cached_tokens=r.usage.cached_tokens,
                cost_usd=None,
                output=r.output,
                error=r.error,
                transcript=r.transcript,
            )
        )
        note = notes.format_entry(
            when=started,
            job=r.job.name,
            status=r.status,
            seconds=r.duration_s,
            tokens=r.tokens,
            text=self.redact(r.text if r.status == "ok" else r.error or ""),
        )
        ws = self.project.config.workspace
        notes.append(daily_note_path(self.project.root, ws, started.date()), note)


class JobSink:
    """Where one job's events go: its transcript, the ledger's calls, the progress display.
    It sums the usage as calls happen, so that a failed job still counts its tokens."""

    def __init__(
        self, job: Job, transcript: Transcript, state: State, run_id: str, progress: Progress
    ) -> None:
        self.job = job
        self.transcript = transcript
        self.state = state
        self.run_id = run_id
        self.progress = progress
        self.usage = Usage()

    def __call__(self, kind: str, **fields: Any) -> None:
        self.transcript.event(kind, **fields)
        if kind == "assistant":
            u = fields["usage"]
            self.usage += Usage(u["prompt"], u["completion"], u["cached"])
            self.state.record_call(
                self.run_id,
                self.job.task,
                self.job.item or "",
                fields["step"],
                fields["model"],
                u,
                fields["seconds"],
            )
        self.progress.job_event(self.job, kind, fields)


Attempt = tuple["Outcome | None", str, "str | None", "str | None"]


def _attempt(ctx: RunContext, job: Job, sink: JobSink) -> Attempt:
    """Run the job; (outcome, status, reason, error). What ends a job is caught here; what
    ends the run (a clawfile or template error, a replay miss) propagates."""
    try:
        outcome = JobExecution(ctx, job, sink).execute()
    except KeyboardInterrupt:
        return None, "interrupted", "interrupted", "interrupted (Ctrl-C or SIGTERM)"
    except LimitExceeded as e:
        return None, "limit", str(e).split(":")[0], str(e)
    except TaskFailed as e:
        return None, "failed", type(e).__name__, str(e)
    ctx.upstream[job.task] = _upstream(ctx.upstream.get(job.task), outcome)
    if outcome.verdict is not None and not outcome.verdict.get("ok"):
        return outcome, "failed", "check failed", str(outcome.verdict.get("summary", ""))
    return outcome, "ok", None, None


def skipped(job: Job, reason: str) -> JobResult:
    return JobResult(job, "skipped", reason, 0.0, Usage(), None, reason, "")


def _findings(outcome: Outcome | None) -> tuple[str, ...]:
    from claw_batch.answers import findings_text

    if outcome is None or outcome.verdict is None:
        return ()
    return tuple(findings_text(outcome.verdict))


def transcript_name(job: Job) -> str:
    """A file name per job; fan-out items get a hash so that similar names never collide."""
    safe = "".join(c if c.isalnum() or c in "-_.[]" else "_" for c in job.name)[:120]
    if job.item is None:
        return f"{safe}.jsonl"
    digest = hashlib.sha256(job.item.encode()).hexdigest()[:8]
    return f"{safe}-{digest}.jsonl"


def _upstream(previous: Upstream | None, outcome: Outcome) -> Upstream:
    """What `needs.X` shows: the output path and result; fan-out items' results joined."""
    if previous is None:
        return Upstream(outcome.output, outcome.text)
    return Upstream(outcome.output, previous.result + "\n" + outcome.text)

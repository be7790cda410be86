"""`claw run`: plan the jobs, skip what is up to date, run the rest through the tool loop,
record what happened."""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets as _secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from claw_batch import cancel, notes, skills
from claw_batch.atomic import write_atomic
from claw_batch.childenv import scrubbed_env
from claw_batch.clawfile import Project
from claw_batch.context import daily_note_path
from claw_batch.endpoints import Mode, Models, api_keys
from claw_batch.errors import (
    ClawError,
    Interrupted,
    LimitExceeded,
    Locked,
    TaskFailed,
    UsageError,
)
from claw_batch.filehash import FileHashes
from claw_batch.graph import Graph, build
from claw_batch.jobrun import (
    NOT_RUN,
    JobResult,
    JobSink,
    attempt,
    findings,
    joined,
    not_run,
    transcript_name,
)
from claw_batch.jobs import Job, expand, select_tasks
from claw_batch.lock import ProjectLock
from claw_batch.prepare import Prepared, RunContext, fingerprint_of, prepare
from claw_batch.progress import Progress
from claw_batch.redact import Redactor, secrets_from_env
from claw_batch.report import envelope
from claw_batch.scheduler import Scheduler
from claw_batch.state import Done, JobRecord, State
from claw_batch.transcript import Transcript
from claw_batch.uptodate import Decision, Fingerprint, decide


@dataclass(frozen=True)
class RunOptions:
    targets: tuple[str, ...] = ()
    keep_going: bool = False
    jobs: int = 1  # -j: jobs at a time
    force: bool = False
    dry_run: bool = False
    files: tuple[str, ...] = ()
    model: str | None = None
    mode: Mode = field(default_factory=Mode)
    argv: tuple[str, ...] = ()
    wait: bool = False  # another run holds the project: wait instead of exiting 75


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
        self.graph: Graph = build(project.config)

    def tasks(self) -> list[str]:
        """The selected tasks and everything they depend on, each after its upstream."""
        return self.graph.order(select_tasks(self.project.config, self.options.targets))

    def plan(self) -> list[Job]:
        """The jobs as they are now; a fan-out over an upstream's outputs is expanded again
        when its turn comes, after the upstream ran."""
        root = self.project.root
        return [job for name in self.tasks() for job in expand(self.project.config, root, name)]

    def run(self) -> RunSummary:
        """Run the planned jobs under the project lock. Errors that stop the run (the lock,
        a replay miss, a template error, Ctrl-C) end up in the summary; only a bug
        propagates."""
        names = self.tasks()  # an unknown target is a usage error before anything is written
        if self.options.dry_run:  # read-only: no lock, never in a running run's way
            return self._run(names)
        lock = ProjectLock(
            self.project.root,
            wait=self.options.wait,
            argv=" ".join(["claw", *self.options.argv[1:]]),
            on_wait=lambda held: self.progress.message(f"claw: {held}; waiting"),
        )
        try:
            with lock:
                return self._run(names)
        except Locked as e:  # nothing ran and nothing was written: no ledger entry
            return RunSummary("", exit_code=e.exit_code, error=str(e))

    def _run(self, names: list[str]) -> RunSummary:
        cancel.reset()
        now = now_for_run(self.environ)
        summary = RunSummary("" if self.options.dry_run else new_run_id(now))
        state = self._open_state()
        run = _Run(self, state, summary, now)
        summary.exit_code = 1  # what the ledger says if a bug ends the run
        try:
            run.tasks(names)
            summary.exit_code = exit_code(summary.results)
        except ClawError as e:
            summary.exit_code, summary.error = e.exit_code, self.redact(str(e))
        except KeyboardInterrupt:
            summary.exit_code, summary.error = Interrupted.exit_code, "interrupted"
        finally:
            run.close()
        return summary

    def _open_state(self) -> State | None:
        path = self.project.root / ".claw" / "state.db"
        if self.options.dry_run:
            return State(path, readonly=True) if path.exists() else None
        return State(path)


class _Run:
    """One run's working state: the ledger, file hashes, what each task produced."""

    def __init__(self, runner: Runner, state: State | None, summary: RunSummary, now: dt.datetime):
        self.r = runner
        self.state = state
        self.summary = summary
        self.now = now
        root = runner.project.root
        self.dry = runner.options.dry_run
        self.run_dir = root / ".claw" / "runs" / summary.run_id
        self.hashes = FileHashes(state, root) if state else FileHashes(None, root)
        self.done = state.done() if state else {}
        self.produced: dict[str, dict[str, str | None]] = {}  # task -> its outputs' hashes
        self.pending: set[str] = set()  # dry run: tasks that would run
        self.failed: set[str] = set()
        self.noted: set[str] = set()  # tasks whose daily-note entry is written
        self.lock = threading.Lock()  # jobs run in threads (-j)
        if state and not self.dry:
            state.begin_run(summary.run_id, now.isoformat(), " ".join(runner.options.argv))
        ws = runner.project.config.workspace
        self.ctx = RunContext(
            project=runner.project,
            models=runner.models,
            now=now,
            env=scrubbed_env(),
            files=runner.options.files,
            model_override=runner.options.model,
            skills=tuple(skills.discover(skills.skill_dirs(root, ws))),
        )

    def tasks(self, names: list[str]) -> None:
        scheduler = Scheduler(
            jobs=self.r.options.jobs,
            upstream=self.r.graph.upstream,
            expand=lambda name: expand(self.r.project.config, self.r.project.root, name),
            check=self.check,
            on_result=self.finished,
            on_task_done=self.note,
        )
        scheduler.run(names)
        if any(r.status == "interrupted" for r in self.summary.results):
            raise Interrupted("interrupted")

    def finished(self, result: JobResult) -> bool:
        """Record a job's result; True when no more jobs should start."""
        self.summary.results.append(result)
        self.r.progress.job_finished(result)
        if result.status == "interrupted":
            return True
        if result.status in ("failed", "limit", "skipped"):
            self.failed.add(result.job.task)
            return not self.r.options.keep_going and result.status != "skipped"
        return False

    def check(self, job: Job) -> JobResult | Callable[[], JobResult]:
        """The job's result when it need not run, else the work that runs it."""
        blocked = [n for n in self.r.graph.upstream(job.task) if n in self.failed]
        if blocked:
            return not_run(job, "skipped", (f"needs {', '.join(blocked)}, which failed",))
        prepared = prepare(self.ctx, job, self.r.graph.upstream(job.task))
        fp = fingerprint_of(prepared, self.hashes.hash, self.upstream(job.task))
        record = self.done.get((job.task, job.item or ""))
        outputs_now = {p: self.hashes.hash(p) for p in record.outputs} if record else {}
        decision = self.decide(job, record, fp, outputs_now)
        if not decision.run:
            return self.keep(job, record, decision, outputs_now)
        if self.dry:
            self.pending.add(job.task)
            return not_run(job, "would-run", decision.reasons, prepared.output)
        return lambda: self.execute(prepared, fp, decision)

    def upstream(self, task: str) -> dict[str, str | None]:
        """The outputs of the tasks this one `needs:` (its prompt can show them as
        needs.X). An upstream reached only through an input glob is not repeated here: the
        files the job reads are already in its inputs, by content — so one changed ticket
        reruns the one review that reads it, not all of them."""
        out: dict[str, str | None] = {}
        with self.lock:
            for name in self.r.project.config.tasks[task].needs:
                out.update(self.produced.get(name, {}))
        return out

    def decide(
        self,
        job: Job,
        record: Done | None,
        fp: Fingerprint,
        outputs_now: dict[str, str | None],
    ) -> Decision:
        upstream_pending = [n for n in self.r.graph.upstream(job.task) if n in self.pending]
        if upstream_pending:
            return Decision(True, tuple(f"upstream {n} would run" for n in upstream_pending))
        task = self.r.project.config.tasks[job.task]
        return decide(record, fp, outputs_now, force=self.r.options.force, always=task.always)

    def keep(
        self,
        job: Job,
        record: Done | None,
        decision: Decision,
        hashes: dict[str, str | None],
    ) -> JobResult:
        assert record is not None  # only a job that succeeded before is not run
        first = next(iter(record.outputs), None)
        with self.lock:
            self.produced.setdefault(job.task, {}).update(hashes)
            upstream = self.ctx.upstream
            upstream[job.task] = joined(upstream.get(job.task), first, record.result)
        return not_run(job, decision.status, decision.reasons, first)

    def execute(self, p: Prepared, fp: Fingerprint, decision: Decision) -> JobResult:
        assert self.state is not None
        job = p.job
        started_wall = now_for_run(self.r.environ)
        self.state.start_job(
            self.summary.run_id, job.task, job.item or "", started_wall.isoformat()
        )
        transcript = Transcript(self.run_dir / transcript_name(job), self.r.redact)
        sink = JobSink(job, transcript, self.state, self.summary.run_id, self.r.progress)
        sink("start", job=job.name, task=job.task, item=job.item, reasons=decision.reasons)
        self.r.progress.job_started(job)
        started = time.monotonic()
        try:
            outcome, status, reason, error = attempt(self.ctx, p, sink)
        except Exception as e:  # it stops the run: close the job's records first
            self.abort(job, transcript, sink, started, started_wall, e)
            raise
        result = JobResult(
            job=job,
            status=status,
            reason=reason,
            duration_s=round(time.monotonic() - started, 3),
            usage=sink.usage,
            output=outcome.output if outcome else None,
            error=self.r.redact(error) if error else None,
            transcript=transcript.path.relative_to(self.r.project.root).as_posix(),
            text=outcome.text if outcome else "",
            findings=tuple(self.r.redact(f) for f in findings(outcome)),
            reasons=decision.reasons,
        )
        transcript.event(
            "end", status=status, reason=reason, error=result.error, seconds=result.duration_s
        )
        transcript.close()
        self.record(result, started_wall, p, fp)
        return result

    def record(self, r: JobResult, started: dt.datetime, p: Prepared, fp: Fingerprint) -> None:
        assert self.state is not None
        row = JobRecord(
            self.summary.run_id,
            r.job.task,
            r.job.item or "",
            r.status,
            r.reason,
            started.isoformat(),
            r.duration_s,
            r.usage.prompt_tokens,
            r.usage.completion_tokens,
            r.usage.cached_tokens,
            None,
            r.output,
            r.error,
            r.transcript,
        )
        if r.status != "ok":
            self.state.finish_job(row)
            return
        outputs = {path: self.hashes.hash(path) for path in p.declared_outputs}
        written = {path: h for path, h in outputs.items() if h is not None}
        self.state.succeed_job(
            row, Done(r.job.task, r.job.item or "", fp.value, fp.parts, written, r.text)
        )
        with self.lock:
            self.produced.setdefault(r.job.task, {}).update(outputs)
            upstream = self.ctx.upstream
            upstream[r.job.task] = joined(upstream.get(r.job.task), r.output, r.text)

    def abort(
        self,
        job: Job,
        transcript: Transcript,
        sink: JobSink,
        started: float,
        started_wall: dt.datetime,
        error: Exception,
    ) -> None:
        assert self.state is not None
        message = self.r.redact(str(error))
        transcript.event("end", status="error", error=message)
        transcript.close()
        self.state.finish_job(
            JobRecord(
                self.summary.run_id,
                job.task,
                job.item or "",
                "error",
                type(error).__name__,
                started_wall.isoformat(),
                round(time.monotonic() - started, 3),
                sink.usage.prompt_tokens,
                sink.usage.completion_tokens,
                sink.usage.cached_tokens,
                None,
                None,
                message,
                transcript.path.relative_to(self.r.project.root).as_posix(),
            )
        )

    def note(self, task: str) -> None:
        """One daily-note entry per task per run, for the jobs that ran."""
        ran = [r for r in self.summary.results if r.job.task == task and r.status not in NOT_RUN]
        if self.dry or not ran or task in self.noted:
            return
        self.noted.add(task)
        jobs = [
            (
                r.job.item or "",
                r.status,
                r.duration_s,
                r.tokens,
                self.r.redact(r.text if r.status == "ok" else r.error or ""),
            )
            for r in ran
        ]
        entry = notes.format_task_entry(when=self.now, task=task, jobs=jobs)
        ws = self.r.project.config.workspace
        notes.append(daily_note_path(self.r.project.root, ws, self.now.date()), entry)

    def close(self) -> None:
        if self.state is None:
            return
        if not self.dry:
            self.hashes.save()
            for task in dict.fromkeys(r.job.task for r in self.summary.results):
                self.note(task)  # tasks the run stopped in the middle of
            finished = now_for_run(self.r.environ).isoformat()
            status = RUN_STATUS.get(self.summary.exit_code, "error")
            self.state.end_run(self.summary.run_id, finished, status, self.summary.exit_code)
            if self.run_dir.is_dir():
                text = json.dumps(envelope(self.summary), indent=2)
                write_atomic(self.run_dir / "summary.json", text)
        self.state.close()

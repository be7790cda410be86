"""One run's working state: the ledger, the file hashes, what each task produced; it
decides each job (skip, keep, run) and records what happened."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from claw_batch.agent.budget import Spend
from claw_batch.agent.systemprompt import daily_note_path
from claw_batch.clock import now_for_run
from claw_batch.errors import ClawError, Interrupted, LimitExceeded, TaskFailed
from claw_batch.memory import notes
from claw_batch.plan.jobs import Job
from claw_batch.plan.render import joined
from claw_batch.plan.uptodate import Decision, Fingerprint, decide
from claw_batch.run.pool import Scheduler
from claw_batch.run.prepare import (
    NOT_UTF8,
    Prepared,
    RunContext,
    TaskKey,
    fingerprint_of,
    prepare,
    system_prompt,
    task_key,
    unrecordable,
)
from claw_batch.run.results import NO_USAGE, NOT_RUN, JobResult, not_run
from claw_batch.safety.atomic import write_atomic
from claw_batch.safety.childenv import git_read_only, scrubbed_env
from claw_batch.safety.paths import checked_output, shown_path
from claw_batch.safety.tempsweep import sweep_run_folders
from claw_batch.safety.untrusted import printable
from claw_batch.skills import cache as skillcache
from claw_batch.skills import skill as skills
from claw_batch.store.filehash import FileHashes
from claw_batch.store.state import Done, JobRecord, State
from claw_batch.store.verdicts import Verdicts
from claw_batch.taint.ledger import TaintedFiles, Writer

if TYPE_CHECKING:
    from claw_batch.run.jobrun import JobSink
    from claw_batch.run.runner import Runner, RunSummary
    from claw_batch.store.transcript import Transcript
    from claw_batch.taint.jobtaint import JobTaint

UP_TO_DATE = Decision(False, ())

# The ledger's word for each exit code.
RUN_STATUS = {0: "ok", 1: "failed", 2: "error", 3: "limit", 130: "interrupted"}


class RunSession:
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
        self.sealed = state.sealed() if state else {}  # every job with a last success
        self.produced: dict[str, dict[str, str | None]] = {}  # task -> its outputs' hashes
        self.pending: set[str] = set()  # dry run: tasks that would run
        self.failed: set[str] = set()
        self.noted: set[str] = set()  # tasks whose daily-note entry is written
        self.outside: set[Job] = set()  # jobs that read content from outside the project
        # Which files are outside content: watched, or written by a tainted job (the ledger).
        untrusted = runner.project.config.untrusted
        self.tainted = TaintedFiles(state, untrusted, self.hashes.hash, str(root))
        self.keys: dict[str, TaskKey | None] = {}  # per task, for the quick check
        self.quick_updates: list[tuple[str, str, str]] = []  # (quick, task, item)
        self._verdicts: Verdicts | None = None  # opened by the first check task
        self.lock = threading.Lock()  # jobs run in threads (-j)
        self.unwritten: list[str] = []  # files of the run's own that could not be written
        if state and not self.dry:
            argv = runner.redact(" ".join(runner.options.argv))  # a key given on the command line
            state.begin_run(summary.run_id, now.isoformat(), argv)
            # Temp files a killed run left; the real clock's start, as `now` can be pinned
            sweep_run_folders(root, runner.project.config, before_ns=time.time_ns())
        ws = runner.project.config.workspace
        scanned = skillcache.scan(root, skills.skill_dirs(root, ws), write=not self.dry)
        found = skills.pick(scanned)
        # Per skill that is not available on this machine: what it lacks.
        self.unavailable = {s.name: s.unavailable(runner.environ) for s in found}
        self.ctx = RunContext(
            project=runner.project,
            models=runner.models,
            now=now,
            env={**scrubbed_env(), **(git_read_only(root) if runner.options.hook else {})},
            files=runner.options.files,
            model_override=runner.options.model,
            skills=tuple(s for s in found if not self.unavailable[s.name]),
            redact=runner.redact,
            tainted=self.tainted,
            spend=Spend(runner.project.config, state.spent_since, now)
            if state and not self.dry
            else None,
        )

    def tasks(self, names: list[str]) -> None:
        self._say_unavailable(names)
        scheduler = Scheduler(
            jobs=self.r.options.jobs,
            upstream=self.r.graph.upstream,
            expand=self._expand,
            check=self.check,
            on_result=self.finished,
            on_task_done=self.note,
        )
        scheduler.run(names)
        if any(r.status == "interrupted" for r in self.summary.results):
            raise Interrupted("interrupted")

    def _expand(self, name: str) -> list[Job]:
        """The task's jobs, when its turn comes; the progress display counts them."""
        jobs = self.r.jobs_of(name)
        self.r.progress.expect(name, len(jobs))
        return jobs

    def _say_unavailable(self, names: list[str]) -> None:
        """A skill a task names that this machine cannot offer: said, not fatal."""
        for name in names:
            for skill in self.r.project.config.tasks[name].skills or ():
                if self.unavailable.get(skill):
                    self.r.progress.message(
                        f"claw: {name}: skill {skill!r} is not offered: it needs "
                        f"{', '.join(self.unavailable[skill])}"
                    )

    def finished(self, result: JobResult) -> bool:
        """Record a job's result; True when no more jobs should start."""
        self.summary.results.append(result)
        self.r.progress.job_finished(result)
        if result.status == "interrupted":
            return True
        if result.status in ("failed", "limit", "skipped"):
            self.failed.add(result.job.task)
            # A file's name (a stranger's, in a watched folder) stops no other job.
            stops = result.status != "skipped" and result.reason != NOT_UTF8
            return stops and not self.r.options.keep_going
        return False

    def check(self, job: Job) -> JobResult | Callable[[], JobResult]:
        """The job's result when it need not run, else the work that runs it."""
        if self.failed:
            blocked = [n for n in self.r.graph.upstream(job.task) if n in self.failed]
            if blocked:
                return not_run(job, "skipped", (f"needs {', '.join(blocked)}, which failed",))
        refused = unrecordable(job)
        if refused is not None:  # its records (the note, the report) name it as printed
            shown = dataclasses.replace(job, item=printable(job.item or ""))
            return JobResult(shown, "failed", NOT_UTF8, 0.0, NO_USAGE, None, refused, "")
        key = self.task_key(job.task)
        sealed = self.sealed.get((job.task, job.item or ""))
        if key and sealed and key.unchanged(sealed, job.item, self.hashes.stamp):
            if not self.r.graph.dependents(job.task):
                return not_run(job, "up-to-date", (), TaskKey.first_output(sealed))
            return self.keep(job, self.last_success(job), UP_TO_DATE, None)
        record = self.last_success(job)
        prepared = prepare(self.ctx, job, self.r.graph.upstream(job.task))
        fp = fingerprint_of(prepared, self.hashes.hash, self.upstream(job.task))
        outputs_now = {o: self.output_hash(prepared, o) for o in record.outputs} if record else {}
        decision = self.decide(job, record, fp, outputs_now)
        if not decision.run:
            if key and decision.status == "up-to-date" and not self.dry:
                quick = self.seal(key, job, fp, list(outputs_now))
                if quick is not None and (record is None or quick != record.quick):
                    self.quick_updates.append((quick, job.task, job.item or ""))
            return self.keep(job, record, decision, outputs_now)
        if self.dry:
            self.pending.add(job.task)
            result = not_run(job, "would-run", decision.reasons, prepared.output)
            return dataclasses.replace(result, prompt_estimate=self.estimate(prepared))
        if prepared.task.check and not self.r.options.force:
            known = self.verdicts().get(job.task, job.item or "", fp.value)
            if known is not None:
                return self.recall(prepared, *known)
        return lambda: self.execute(prepared, fp, decision)

    def output_hash(self, p: Prepared, rel: str) -> str | None:
        """An output's hash now; None, as if missing (the job runs again, and the check of its
        outputs says why), when it resolves where the job may not write: a symlink to a host
        file is not followed to hash that file."""
        try:
            checked_output(p.policy, rel)
        except TaskFailed:
            return None
        return self.hashes.hash(rel)

    def estimate(self, p: Prepared) -> int:
        """The prompt tokens of the job's first model call: what `claw plan` shows."""
        from claw_batch.agent.loop import prompt_tokens
        from claw_batch.llm.messages import Message

        system = system_prompt(self.ctx, p.job, p.skills).text
        specs = [t.spec() for t in p.tools.values()]
        return prompt_tokens([Message("system", system), Message("user", p.prompt)], specs)

    def verdicts(self) -> Verdicts:
        assert self.state is not None
        if self._verdicts is None:
            self._verdicts = Verdicts(self.state)
        return self._verdicts

    def recall(self, p: Prepared, verdict: str, run_id: str) -> JobResult:
        """A failed check whose fingerprint has not changed since: the same verdict."""
        from claw_batch.agent.answers import findings_text

        parsed = json.loads(verdict)
        why = f"the verdict of run {run_id}: nothing it reads has changed (-B asks again)"
        return JobResult(
            job=p.job,
            status="failed",
            reason="check failed",
            duration_s=0.0,
            usage=NO_USAGE,
            output=p.output,
            error=self.r.redact(str(parsed.get("summary", ""))),
            transcript="",
            text=verdict,
            findings=tuple(self.r.redact(f) for f in findings_text(parsed)),
            reasons=(why,),
        )

    def task_key(self, task: str) -> TaskKey | None:
        """The task's key for the quick check, once per run; None: every job of it takes
        the full check (-B, an upstream that would run, templates that read the clock...)."""
        if task not in self.keys:
            pending = any(n in self.pending for n in self.r.graph.upstream(task))
            eligible = not (self.r.options.force or pending)
            self.keys[task] = task_key(self.ctx, task, self.hashes.hash) if eligible else None
        return self.keys[task]

    def last_success(self, job: Job) -> Done | None:
        """The job's last success, from the ledger."""
        if self.state is None or (job.task, job.item or "") not in self.sealed:
            return None
        return self.state.done(job.task, job.item or "")

    def seal(self, key: TaskKey, job: Job, fp: Fingerprint, outputs: list[str]) -> str | None:
        """What the quick check compares next time, from the stat keys the job's item and
        outputs had when they were hashed for this fingerprint."""
        if job.item in outputs or not key.shared.keys().isdisjoint(outputs):
            return None  # a job that rewrites what it reads: its inputs' stats are not its own
        stamp = self.hashes.hashed_stamp([job.item, *outputs] if job.item else outputs)
        return key.seal(fp, stamp, outputs)

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
        hashes: Mapping[str, str | None] | None,
    ) -> JobResult:
        """The result of a job that need not run; `hashes`: its outputs' hashes now (None:
        as recorded)."""
        assert record is not None  # only a job that succeeded before is not run
        first = next(iter(record.outputs), None)
        if self.r.graph.dependents(job.task):  # what the tasks after it see of it
            with self.lock:
                self.produced.setdefault(job.task, {}).update(hashes or record.outputs)
                upstream = self.ctx.upstream
                previous = upstream.get(job.task)
                upstream[job.task] = joined(previous, first, record.result, record.tainted)
        return not_run(job, decision.status, decision.reasons, first)

    def execute(self, p: Prepared, fp: Fingerprint, decision: Decision) -> JobResult:
        from claw_batch.run.jobrun import JobSink, attempt, findings, transcript_name
        from claw_batch.store.transcript import Transcript

        assert self.state is not None
        job = p.job
        taint = self.job_taint(p)
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
            outcome, status, reason, error = attempt(self.ctx, p, sink, taint)
        except Exception as e:  # it stops the run: close the job's records first
            self.abort(job, transcript, sink, started, started_wall, e)
            raise
        finally:
            if taint.source is not None:  # its daily-note quote stays out of system prompts
                with self.lock:
                    self.outside.add(job)
        duration = round(time.monotonic() - started, 3)
        shown = self.r.redact(error) if error else None
        transcript.event("end", status=status, reason=reason, error=shown, seconds=duration)
        try:
            transcript.close()
        except TaskFailed as e:  # a full disk: a job without its whole record is not done
            if status == "ok":
                outcome, status, reason, error = None, "failed", "TaskFailed", str(e)
        result = JobResult(
            job=job,
            status=status,
            reason=reason,
            duration_s=duration,
            usage=sink.usage,
            output=outcome.output if outcome else None,
            error=self.r.redact(error) if error else None,
            transcript=transcript.path.relative_to(self.r.project.root).as_posix(),
            text=outcome.text if outcome else "",
            findings=tuple(self.r.redact(f) for f in findings(outcome)),
            reasons=decision.reasons,
            cost_usd=sink.cost_usd,
        )
        self.record(result, started_wall, p, fp, taint.source)
        return result

    def job_taint(self, p: Prepared) -> JobTaint:
        """What the job has read from outside: what it reads before its model is called, and
        then what its tools read (claw_batch.taint.jobtaint)."""
        from claw_batch.sandbox.bubblewrap import write_dirs
        from claw_batch.taint.jobtaint import JobTaint

        task, policy = p.task, p.policy
        # Where its commands may write: what a granted bash of a tainted job taints.
        dirs = ("",) if task.sandbox == "none" else write_dirs(policy.write_globs, policy.outputs)
        return JobTaint(
            sources=p.tainted,
            files=self.tainted,
            allow=task.untrusted_allow,
            tools=task.offered_tools,
            writer=Writer(p.job.task, p.job.item or "", self.summary.run_id),
            bash_dirs=dirs,
        )

    def record(
        self,
        r: JobResult,
        started: dt.datetime,
        p: Prepared,
        fp: Fingerprint,
        tainted: str | None = None,
    ) -> None:
        """`tainted`: what outside content the job read (its result is shown fenced)."""
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
            r.cost_usd,
            r.output,
            r.error,
            r.transcript,
        )
        if p.task.check:  # a failed verdict is given again while nothing changes
            if r.status == "failed" and r.reason == "check failed":
                self.verdicts().put(r.job.task, r.job.item or "", fp.value, r.text, row.run_id)
            elif r.status == "ok":
                self.verdicts().forget(r.job.task, r.job.item or "")
        if r.status != "ok":
            self.state.finish_job(row)
            return
        # The output the runner wrote holds r.text: hashed from it, not read back (a file the
        # model's tools wrote is read).
        outputs = {
            path: self.hashes.hash_written(path, r.text.encode())
            if path == r.output
            else self.hashes.hash(path)
            for path in p.declared_outputs
        }
        written = {path: h for path, h in outputs.items() if h is not None}
        key = self.task_key(r.job.task)
        quick = self.seal(key, r.job, fp, list(written)) if key else None
        item = r.job.item or ""
        done = Done.of(r.job.task, item, fp.value, fp.parts, written, r.text, quick, tainted)
        self.state.succeed_job(row, done)
        with self.lock:
            self.produced.setdefault(r.job.task, {}).update(outputs)
            upstream = self.ctx.upstream
            upstream[r.job.task] = joined(upstream.get(r.job.task), r.output, r.text, tainted)

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
        with contextlib.suppress(TaskFailed):  # unwritable: the error in flight says more
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
                sink.cost_usd,
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
            notes.NoteJob(
                r.job.item or "",
                r.status,
                r.duration_s,
                r.tokens,
                self.r.redact(r.text if r.status == "ok" else r.error or ""),
                r.cost_usd,
                r.job in self.outside,
            )
            for r in ran
        ]
        entry = notes.format_task_entry(when=self.now, task=task, jobs=jobs)
        root, ws = self.r.project.root, self.r.project.config.workspace
        path = daily_note_path(root, ws, self.now.date())
        try:
            notes.append(path, entry)
        except OSError as e:  # a full disk: the note is as it was; the run says so
            self.unwritten.append(f"daily note {shown_path(path, root)}: {e.strerror or e}")

    def close(self) -> None:
        """The run's last writes, each tried even when one before failed (a full disk): what
        could not be written becomes the run's error (exit 1), never a traceback."""
        if self.state is None:
            return
        state = self.state
        if not self.dry:
            self._closing(self.hashes.save)
            self._closing(lambda: state.set_quick(self.quick_updates))
            for task in dict.fromkeys(r.job.task for r in self.summary.results):
                self.note(task)  # tasks the run stopped in the middle of
            self._settle_unwritten()
            self._closing(self._write_summary)
            self._closing(self._end_run)
        self._closing(state.close)
        self._settle_unwritten()

    def _closing(self, step: Callable[[], None]) -> None:
        try:
            step()
        except ClawError as e:
            self.unwritten.append(str(e))

    def _settle_unwritten(self) -> None:
        if not self.unwritten:
            return
        if self.summary.error is None:
            self.summary.error = self.r.redact(self.unwritten[0])
        if self.summary.exit_code in (0, LimitExceeded.exit_code):
            self.summary.exit_code = TaskFailed.exit_code

    def _write_summary(self) -> None:
        if not self.run_dir.is_dir():
            return
        from claw_batch.run.envelope import envelope

        path = self.run_dir / "summary.json"
        try:
            write_atomic(path, json.dumps(envelope(self.summary), indent=2))
        except OSError as e:
            raise ClawError(
                f"run summary {shown_path(path, self.r.project.root)}: {e.strerror}"
            ) from e

    def _end_run(self) -> None:
        assert self.state is not None
        finished = now_for_run(self.r.environ).isoformat()
        status = RUN_STATUS.get(self.summary.exit_code, "error")
        self.state.end_run(self.summary.run_id, finished, status, self.summary.exit_code)

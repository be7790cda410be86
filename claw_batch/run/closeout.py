"""What a run writes of its own: the daily note (an entry per task as the task ends, and at
the end for the tasks the run stopped in the middle of; none in a run for a git hook, which
leaves the work tree as it found it), then the file hashes, the quick seals, summary.json
and the ledger's end of run. Each is tried even when one before failed (a full disk): what
could not be written becomes the run's error (exit 1), never a traceback."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from claw_batch.clock import now_for_run
from claw_batch.config import Project
from claw_batch.errors import ClawError, LimitExceeded, TaskFailed
from claw_batch.memory import notes
from claw_batch.memory.notes import NoteJob, TaskEntry, daily_note_path
from claw_batch.plan.jobs import Job
from claw_batch.plan.uptodate import Decider
from claw_batch.run.envelope import envelope_chunks
from claw_batch.run.results import NOT_RUN, RUN_STATUS, JobResult, RunSummary
from claw_batch.safety.atomic import write_atomic
from claw_batch.safety.paths import shown_path
from claw_batch.store.filehash import FileHashes
from claw_batch.store.state import State

# The ledger's word for each exit code.


class CloseOut:
    def __init__(
        self,
        state: State | None,
        project: Project,
        run_dir: Path,
        *,
        hashes: FileHashes,
        decider: Decider,
        redact: Callable[[str], str],
        environ: Mapping[str, str],
        now: dt.datetime,
        dry_run: bool,
        notes: bool = True,
    ) -> None:
        self.state = state
        self.project = project
        self.run_dir = run_dir
        self.hashes = hashes
        self.decider = decider
        self.redact = redact
        self.environ = environ
        self.now = now
        self.dry_run = dry_run
        self.notes = notes  # a daily-note entry per task (not in a hook run: the ledger's)
        self.outside: set[Job] = set()  # jobs that read content from outside the project
        self.noted: set[str] = set()  # tasks whose daily-note entry is written
        self.unwritten: list[str] = []  # files of the run's own that could not be written
        # The daily note's entry of each task, until it is written.
        self._entries: dict[str, TaskEntry] = {}
        self._lock = threading.Lock()  # jobs run in threads (-j)

    def read_outside(self, job: Job) -> None:
        """The job read outside content: its daily-note quote stays out of system prompts."""
        with self._lock:
            self.outside.add(job)

    def kept(self, result: JobResult) -> JobResult:
        """The result as the run keeps it to its end: without its answer (a job's whole
        output, 100,000 of them in a large run). The daily note's entry for its task takes
        what it needs of it now (claw_batch.memory.TaskEntry)."""
        task = result.job.task
        if self.notes and not self.dry_run and task not in self.noted:
            entry = self._entries.get(task)
            if entry is None:  # in the order of the results
                entry = self._entries[task] = TaskEntry()
            if result.status not in NOT_RUN:
                # A job without an item after its sub-jobs' lines: named, as they are
                named = result.job.item is None and bool(entry.jobs)
                entry.add(self._note_job(result, entry.quotes(result.status), named))
        return result._replace(text="") if result.text else result

    def sub_job(self, task: str, result: JobResult, outside: bool) -> None:
        """A sub-job (`delegate`) of a job of `task` ended: its task's entry counts it,
        named as the ledger names it (`review-file<3f2a9c1d>`)."""
        if not self.notes or self.dry_run:
            return
        with self._lock:
            if task in self.noted:
                return
            entry = self._entries.get(task)
            if entry is None:
                entry = self._entries[task] = TaskEntry()
        quoted = entry.quotes(result.status)
        text = self.redact(result.text if result.status == "ok" else result.error or "")
        r = result
        entry.add(
            NoteJob(
                r.job.name,
                r.status,
                r.duration_s,
                r.own_usage.total_tokens,  # its sub-jobs' are on their own lines
                text if quoted else "",
                r.own_cost_usd,
                outside,
                r.saved_tokens,
                r.saved_usd,
            )
        )

    def _note_job(self, r: JobResult, quoted: bool, named: bool = False) -> NoteJob:
        """The job as its task's entry sees it; its text only when the entry quotes it."""
        with self._lock:
            outside = r.job in self.outside
            self.outside.discard(r.job)
        text = self.redact(r.text if r.status == "ok" else r.error or "") if quoted else ""
        item, seconds, cost = r.job.item or "", r.duration_s, r.own_cost_usd
        if named:
            item = r.job.name
        return NoteJob(
            item,
            r.status,
            seconds,
            r.own_usage.total_tokens,  # its sub-jobs' are their own lines (sub_job)
            text,
            cost,
            outside,
            r.saved_tokens,
            r.saved_usd,
        )

    def note(self, task: str) -> None:
        """One daily-note entry per task per run, for the jobs that ran."""
        entry = self._entries.pop(task, None)
        if entry is None or not entry.jobs:
            return
        self.noted.add(task)
        root, ws = self.project.root, self.project.config.workspace
        path = daily_note_path(root, ws, self.now.date())
        try:
            notes.append(path, entry.text(self.now, task))
        except OSError as e:  # a full disk: the note is as it was; the run says so
            self.unwritten.append(f"daily note {shown_path(path, root)}: {e.strerror or e}")

    def close(self, summary: RunSummary) -> RunSummary:
        """The run's last writes; the summary as they leave it."""
        if self.state is None:
            return summary
        if not self.dry_run:
            self._try(self.hashes.save)
            self._try(self.decider.save)
            for task in list(self._entries):
                self.note(task)  # tasks the run stopped in the middle of
            summary = self._settled(summary)
            self._try(functools.partial(self._write_summary, summary))
            self._try(functools.partial(self._end_run, summary))
        self._try(self.state.close)
        return self._settled(summary)

    def _try(self, step: Callable[[], None]) -> None:
        try:
            step()
        except ClawError as e:
            self.unwritten.append(str(e))

    def _settled(self, summary: RunSummary) -> RunSummary:
        """What could not be written is the run's error, when nothing else was."""
        if not self.unwritten:
            return summary
        error = summary.error if summary.error is not None else self.redact(self.unwritten[0])
        code = summary.exit_code
        if code in (0, LimitExceeded.exit_code):
            code = TaskFailed.exit_code
        return dataclasses.replace(summary, error=error, exit_code=code)

    def _write_summary(self, summary: RunSummary) -> None:
        if not self.run_dir.is_dir():
            return
        path = self.run_dir / "summary.json"
        try:
            write_atomic(path, envelope_chunks(summary))
        except OSError as e:
            shown = shown_path(path, self.project.root)
            raise ClawError(f"run summary {shown}: {e.strerror}") from e

    def _end_run(self, summary: RunSummary) -> None:
        assert self.state is not None
        finished = now_for_run(self.environ).isoformat()
        status = RUN_STATUS.get(summary.exit_code, "error")
        self.state.end_run(summary.run_id, finished, status, summary.exit_code)

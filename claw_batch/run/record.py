"""What the ledger keeps of the jobs that run: each job's row (marked running when it
starts, then how it ended) and transcript; the last success of one that succeeded (its
fingerprint, its outputs' hashes, its seal for the quick check); and the verdict of a check
that failed, given again while nothing it reads changes (store/verdicts). A job whose name
the ledger cannot hold does not run."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from claw_batch.agent.answers import findings_text
from claw_batch.clock import now_for_run
from claw_batch.plan.fingerprint import Fingerprint
from claw_batch.plan.jobs import Job
from claw_batch.plan.uptodate import Decider
from claw_batch.run.context import RunCache
from claw_batch.run.jobsink import JobSink, transcript_name
from claw_batch.run.prepare import Prepared
from claw_batch.run.results import NO_USAGE, JobResult, not_run
from claw_batch.safety.atomic import DirSyncs
from claw_batch.safety.redact import Redactor
from claw_batch.safety.untrusted import printable
from claw_batch.store.filehash import FileHashes
from claw_batch.store.lastrun import when
from claw_batch.store.samples import Samples
from claw_batch.store.state import Done, JobRecord, State
from claw_batch.store.transcript import Transcript
from claw_batch.store.verdicts import Verdicts
from claw_batch.terminal.progress import Progress

NOT_UTF8 = "name not UTF-8"  # the reason of a job that cannot run for its file's name


def unrecordable(job: Job) -> str | None:
    """Why the job cannot run (None: it can): its file's name is not UTF-8 (a dropped
    file's, a stranger's), which the ledger, the transcripts and the reports cannot hold.
    Only that job fails: the name is the file's, not the clawfile's."""
    if job.item is None or job.item.isascii() or printable(job.item) == job.item:
        return None  # (isascii first: a no-op asks this of every job)
    return (
        f"{printable(job.item)}: the file's name is not UTF-8, and claw records "
        "only names that are; rename the file to run this job"
    )


class Recorder:
    def __init__(
        self,
        state: State | None,
        run_id: str,
        run_dir: Path,
        root: Path,
        *,
        hashes: FileHashes,
        decider: Decider,
        cache: RunCache,
        redact: Redactor,
        environ: Mapping[str, str],
    ) -> None:
        self.state = state
        self.run_id = run_id
        self.root = root
        self.run_dir = run_dir  # the run's transcripts
        self._run_dir_shown = run_dir.relative_to(root).as_posix()  # once, not once a job
        self.hashes = hashes
        self.decider = decider  # seals a success for the quick check
        self.cache = cache  # what the tasks after a job see of it
        self.redact = redact
        self.environ = environ
        self._verdicts: Verdicts | None = None  # opened by the first check task
        self._samples: Samples | None = None  # opened by the first job that uses the call cache
        # The folders of the outputs written, fsynced before the ledger records their jobs
        # done: one fsync a folder for the jobs that end together (State.succeed_job).
        self.synced = DirSyncs()

    def start(self, job: Job) -> dt.datetime:
        """Mark the job running, its last success forgotten; when it started."""
        assert self.state is not None
        started = now_for_run(self.environ)
        self.state.start_job(self.run_id, job.task, job.item or "", started.isoformat())
        return started

    def sample(self, job: Job, *, fresh: bool) -> int:
        """The job's sample index for the call cache; `fresh` (-B): the next one, written
        before its first call."""
        assert self.state is not None
        if self._samples is None:
            self._samples = Samples(self.state)
        task, item = _key(job)
        return self._samples.bump(task, item) if fresh else self._samples.get(task, item)

    def transcript(self, job: Job) -> Transcript:
        return Transcript(self.run_dir / transcript_name(job), self.redact)

    def sink(self, job: Job, transcript: Transcript, progress: Progress) -> JobSink:
        """Where the running job's events go; its model calls are the ledger's too."""
        assert self.state is not None
        return JobSink(job, transcript, self.state, self.run_id, progress)

    def shown(self, transcript: Transcript) -> str:
        """The transcript's path as results and the ledger name it (one of `transcript`'s)."""
        return f"{self._run_dir_shown}/{transcript.path.name}"

    def ended(self, r: JobResult, started: dt.datetime, *, later: bool = False) -> None:
        """A job that did not succeed; `later`: as `record`'s."""
        assert self.state is not None
        row = JobRecord.of(self.run_id, *_key(r.job), started.isoformat(), r)
        self.state.finish_job(row, later=later)

    def flush(self) -> None:
        """Write what `record` left for later: called when no job is starting (the next job
        to start writes it in the transaction of its own start)."""
        if self.state is not None:
            self.state.flush()

    def record(
        self,
        r: JobResult,
        started: dt.datetime,
        p: Prepared,
        fp: Fingerprint,
        tainted: str | None = None,
    ) -> None:
        """`tainted`: what outside content the job read (its result is shown fenced). The
        job's records are written with the next job's start, or by `flush`: whoever runs the
        jobs calls it when none is starting (the scheduler)."""
        assert self.state is not None
        task, item = _key(r.job)
        if p.task.check:  # a failed verdict is given again while nothing changes
            if r.status == "failed" and r.reason == "check failed":
                self.verdicts().put(task, item, fp.value, r.text, self.run_id)
            elif r.status == "ok":
                self.verdicts().forget(task, item)
        if r.status != "ok":
            self.ended(r, started, later=True)
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
        quick = self.decider.seal(r.job, fp, list(written))
        done = Done.of(task, item, fp.value, fp.parts, written, r.text, quick, tainted)
        row = JobRecord.of(self.run_id, task, item, started.isoformat(), r)
        self.state.succeed_job(row, done, self.synced.sync, later=True)
        self.cache.produced(task, outputs, r.output, r.text, tainted)

    def recall(self, p: Prepared, fp: Fingerprint, *, dry_run: bool) -> JobResult | None:
        """A failed check whose fingerprint has not changed since: the same verdict, a job
        of this run in the ledger (for `claw log`, `claw why`). In a dry run, what the job
        would give: no model call, so no prompt to estimate."""
        recalled = self._recalled(p, fp)
        if recalled is None:
            return None
        known, whose = recalled
        if dry_run:
            result = not_run(p.job, "would-run", known.reasons, p.output)
            return result._replace(remembered=known.remembered, again=known.again)
        assert self.state is not None
        started = now_for_run(self.environ).isoformat()
        row = JobRecord.of(self.run_id, *_key(p.job), started, known)
        self.state.finish_job(dataclasses.replace(row, remembered=whose))
        return known

    def may_recall(self, job: Job) -> bool:
        """Whether the ledger holds a failed check of the job, whatever its fingerprint."""
        return self.state is not None and self.verdicts().held(*_key(job))

    def _recalled(self, p: Prepared, fp: Fingerprint) -> tuple[JobResult, str] | None:
        """The verdict given again, and the id of the run that gave it."""
        if self.state is None:
            return None
        known = self.verdicts().get(p.job.task, p.job.item or "", fp.value)
        if known is None:
            return None
        parsed = _verdict_of(known.text)
        if parsed is None:  # a ledger row no longer readable: ask the model again
            return None
        summary = self.redact(str(parsed.get("summary", "")))
        whose = f"the verdict of run {known.run_id} at {when(known.started)}"
        # Its transcript is the one the verdict came from (claw log, the report link it).
        asked = self.run_dir.parent / known.run_id / transcript_name(p.job)
        found = "/" not in known.run_id and asked.is_file()
        transcript = asked.relative_to(self.root).as_posix() if found else ""
        hook = p.task.hook
        command = f"claw hook run -B {hook}" if hook else f"claw run -B {p.job.task}"
        again = f"nothing it reads has changed since; ask again with: {command}"
        result = JobResult(
            job=p.job,
            status="failed",
            reason="check failed",
            duration_s=0.0,
            usage=NO_USAGE,
            output=p.output,
            error=summary,
            transcript=transcript,
            text=known.text,
            findings=tuple(self.redact(f) for f in findings_text(parsed)),
            reasons=(f"remembered: {whose}: {summary}", again),
            remembered=whose,
            again=again,
        )
        return result, known.run_id

    def verdicts(self) -> Verdicts:
        assert self.state is not None
        if self._verdicts is None:
            self._verdicts = Verdicts(self.state)
        return self._verdicts


def _key(job: Job) -> tuple[str, str]:
    """The job as the ledger names it: (task, item), '' for a task without items."""
    return job.task, job.item or ""


def _verdict_of(text: str) -> dict[str, Any] | None:
    """A remembered verdict as its JSON object; None if the ledger's copy cannot be read."""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None

"""`.claw/state.db`: the run ledger in SQLite with WAL — runs, their jobs and the jobs' model
calls, and each job's last success (`done`, what the up-to-date check reads).

A corrupt ledger is moved aside by a `claw run`, which starts a new one; a write SQLite cannot
make (a full disk) raises ClawError and leaves nothing of its transaction: the connection
does that (claw_batch.store.database). The tables are in claw_batch.store.schema.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from claw_batch import baton
from claw_batch.llm.usage import Usage
from claw_batch.store.database import Database

INSERT_CALL = "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# Named: a ledger whose columns were added in another order (schema.ADDED) takes the row too.
JOB_COLUMNS = (
    "INSERT INTO jobs (run_id, task, item, status, reason, started, duration_s, prompt_tokens, "
    "completion_tokens, cached_tokens, cost_usd, output, error, transcript, remembered, "
    "saved_tokens, saved_usd, node, parent)"
)
START_JOB = (
    "INSERT OR REPLACE INTO jobs (run_id, task, item, status, started) "
    "VALUES (?, ?, ?, 'running', ?)"
)
START_SUB_JOB = (  # a sub-job's (`delegate`), with its parent's name from the start
    "INSERT OR REPLACE INTO jobs (run_id, task, item, status, started, parent) "
    "VALUES (?, ?, ?, 'running', ?, ?)"
)

Durable = Callable[[], None]  # makes a job's outputs durable (safety.atomic.DirSyncs.sync)


class JobEnd(Protocol):
    """How a job ended, as the ledger keeps it (claw_batch.run.results.JobResult)."""

    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def own_usage(self) -> Usage: ...  # its own calls' (not its sub-jobs')
    @property
    def own_cost_usd(self) -> float | None: ...
    @property
    def output(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def transcript(self) -> str: ...
    @property
    def saved_tokens(self) -> int: ...
    @property
    def saved_usd(self) -> float | None: ...
    @property
    def node(self) -> str | None: ...


@dataclass(frozen=True)
class JobRecord:
    run_id: str
    task: str
    item: str
    status: str
    reason: str | None
    started: str
    duration_s: float
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float | None
    output: str | None
    error: str | None
    transcript: str | None
    remembered: str | None = None  # the run whose failed verdict this job gave again
    saved_tokens: int = 0  # what the turns the call cache replayed would have cost
    saved_usd: float | None = None
    node: str | None = None  # the cluster node it ran on (--executor ray); None: here
    parent: str | None = None  # a sub-job's parent job (claw_batch.run.delegation)

    @classmethod
    def of(cls, run_id: str, task: str, item: str, started: str, end: JobEnd) -> JobRecord:
        """The row of the job (`task`, `item`) of run `run_id`, started at `started`, that
        ended as `end` says."""
        usage = end.own_usage
        return cls(
            run_id,
            task,
            item,
            end.status,
            end.reason,
            started,
            end.duration_s,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            end.own_cost_usd,
            end.output,
            end.error,
            end.transcript,
            saved_tokens=end.saved_tokens,
            saved_usd=end.saved_usd,
            node=end.node,
        )


@dataclass(frozen=True)
class Done:
    """A job's last success. Its outputs and fingerprint parts are kept as JSON and parsed
    when asked: a no-op over 10,000 jobs that pass the quick check needs neither."""

    task: str
    item: str
    fingerprint: str
    parts_json: str
    outputs_json: str
    result: str
    quick: str | None = None  # plan.quickcheck.TaskKey.seal: a digest, then the output paths
    tainted: str | None = None  # the outside content the job read (claw_batch.taint.jobtaint)

    @classmethod
    def of(
        cls,
        task: str,
        item: str,
        fingerprint: str,
        parts: dict[str, Any],
        outputs: dict[str, str],
        result: str,
        quick: str | None = None,
        tainted: str | None = None,
    ) -> Done:
        parts_json, outputs_json = json.dumps(parts), json.dumps(outputs)
        return cls(task, item, fingerprint, parts_json, outputs_json, result, quick, tainted)

    @functools.cached_property
    def parts(self) -> dict[str, Any]:
        parts: dict[str, Any] = json.loads(self.parts_json)
        return parts

    @functools.cached_property
    def outputs(self) -> dict[str, str]:
        """path -> sha256, as written."""
        outputs: dict[str, str] = json.loads(self.outputs_json)
        return outputs


class State(Database):
    """The runs, their jobs and the jobs' model calls; a job's last success (`done`)."""

    def __init__(self, path: Path, *, readonly: bool = False, recover: bool = False) -> None:
        # A job's model calls, kept until its final transaction (see record_call).
        self._calls: dict[tuple[str, str, str], list[tuple[object, ...]]] = {}
        # Ended jobs not yet written, and whether a thread is writing them (see _end_job).
        self._ends: list[tuple[JobRecord, Done | None, Durable | None]] = []
        self._ends_lock = threading.Lock()
        self._writing = False
        super().__init__(path, readonly=readonly, recover=recover)

    def close(self) -> None:
        try:
            # What is left: a batch that failed, tried once more, or one a Ctrl-C in the
            # scheduler's flush left claimed but unwritten (no job thread writes by now).
            with self._ends_lock:
                left, self._writing = bool(self._ends), True
            if left:
                self._write_ends()
            if self._calls:  # jobs that never reached finish_job: keep what they cost
                with self.transaction():
                    for calls in self._calls.values():
                        self.db.executemany(INSERT_CALL, calls)
                self._calls.clear()
        finally:
            super().close()

    def begin_run(self, run_id: str, started: str, argv: str, trigger: str = "hand") -> None:
        """`argv`: the command as typed (`claw run -j 4`); `trigger`: what started the run
        (hand, cron, schedule, watch, hook <name>)."""
        self._execute(
            "INSERT INTO runs (id, started, status, argv, trigger) VALUES (?, ?, 'running', ?, ?)",
            (run_id, started, argv, trigger),
        )

    def end_run(self, run_id: str, finished: str, status: str, exit_code: int) -> None:
        self.flush()  # never a run ended before the jobs it ended
        self._execute(
            "UPDATE runs SET finished = ?, status = ?, exit_code = ? WHERE id = ?",
            (finished, status, exit_code, run_id),
        )

    def start_job(self, run_id: str, task: str, item: str, started: str) -> None:
        """Mark the job running and forget its last success (the `forget_done` trigger), in
        one statement: a job killed from here on is never taken for done. The ends of jobs
        left for later (`later`) go in the same transaction, when no other thread is writing
        them: at -j 1 the end of one job and the start of the next are one transaction."""
        row = (run_id, task, item, started)
        with self._ends_lock:
            carry = bool(self._ends) and not self._writing
            if carry:
                self._writing = True
        if carry:
            self._write_ends(start=row)
        else:  # one statement, so one transaction
            self._execute(START_JOB, row)

    def start_sub_job(self, run_id: str, task: str, started: str, parent: str) -> None:
        """Mark a sub-job (`delegate`) running under its parent, its last success forgotten."""
        self._execute(START_SUB_JOB, (run_id, task, "", started, parent))

    def succeed_job(
        self, r: JobRecord, done: Done, durable: Durable | None = None, *, later: bool = False
    ) -> None:
        """Record success with the output hashes (after the outputs are safely on disk): the
        job's row, its model calls and its `done` row in one transaction (see _end_job).
        `durable` finishes putting them there (their folders' fsyncs): it is called before
        that transaction, once for all the jobs that share it and end together. `later`: in
        the transaction of the next job to start, or of `flush`, whichever comes first."""
        self._end_job(r, done, durable, later)

    def sealed(self, task: str) -> list[tuple[str, str | None]]:
        """The task's jobs with a last success and their quick seals (plan.quickcheck.TaskKey),
        in the order of their items: all that a no-op needs of the ledger, read from an index
        that holds nothing else (schema.INDEXES), as plain tuples."""
        quick = "quick" if self.has_quick else "NULL"
        sql = f"SELECT item, {quick} FROM done WHERE task = ? ORDER BY item"
        with self._lock:
            cursor = self.db.cursor()
            cursor.row_factory = None  # tuples: a sqlite3.Row per job costs ~0.5 µs more
            return self._checked(lambda: cursor.execute(sql, (task,)).fetchall())

    def done(self, task: str, item: str) -> Done | None:
        """The job's last success in full."""
        quick = "quick" if self.has_quick else "NULL"
        tainted = "tainted" if self.has_taint else "NULL"
        rows = self._query(
            f"SELECT task, item, fingerprint, parts, outputs, result, {quick}, {tainted} "
            "FROM done WHERE task = ? AND item = ?",
            (task, item),
        )
        return Done(*rows[0]) if rows else None

    def set_quick(self, rows: list[tuple[str, str, str]]) -> None:
        """(quick, task, item): jobs the full check found up to date, for the next run."""
        if rows:
            with self.transaction():
                self.db.executemany("UPDATE done SET quick = ? WHERE task = ? AND item = ?", rows)

    def finish_job(self, r: JobRecord, *, later: bool = False) -> None:
        """Record how the job ended, with its model calls, in one transaction (`later`: as
        succeed_job's)."""
        self._end_job(r, None, None, later)

    def flush(self) -> None:
        """Write the ends left for later, unless another thread is writing them already."""
        with self._ends_lock:
            if not self._ends or self._writing:
                return
            self._writing = True
        self._write_ends()

    def _end_job(
        self, r: JobRecord, done: Done | None, durable: Durable | None, later: bool = False
    ) -> None:
        """Group commit: the thread that finds no other writing writes every job that ended
        meanwhile, in one transaction per batch, until none is left; a job that ends while
        another thread writes leaves its rows to it and goes on at once. At -j 32 a
        transaction of its own per job held the ledger for several GIL hand-overs each, and
        the jobs queued behind it. A process killed outright can lose the rows of jobs that
        ended in its last moments (their outputs are on disk; they run again); close()
        writes whatever is left.

        `later`: the job's rows wait for the next job to start (start_job), for another
        thread's batch, or for `flush`: whoever runs the jobs flushes when none starts."""
        with self._ends_lock:
            self._ends.append((r, done, durable))
            if self._writing or later:
                return
            self._writing = True
        self._write_ends()

    def _write_ends(self, start: tuple[str, str, str, str] | None = None) -> None:
        """The ends waiting, in batches, until none is left; `start`: a job's start row
        (start_job), in the first batch's transaction."""
        while True:
            batch: list[tuple[JobRecord, Done | None, Durable | None]] = []
            try:  # from the batch's taking on: a Ctrl-C in the scheduler's flush loses none
                with self._ends_lock:
                    batch = self._ends
                    self._ends = []
                    if not batch and start is None:
                        self._writing = False
                        return
                with baton.released():  # fsyncs of the outputs' folders
                    for sync in {id(d): d for _, _, d in batch if d is not None}.values():
                        sync()  # never a job recorded done before its outputs are durable
                with self.transaction():
                    if batch:
                        self._write_batch(batch)
                    if start is not None:
                        self.db.execute(START_JOB, start)
            except BaseException:
                with self._ends_lock:
                    if self._ends is not batch:  # for close(), or the next job, to try again
                        self._ends[:0] = batch
                    self._writing = False
                raise
            start = None

    def _write_batch(self, batch: list[tuple[JobRecord, Done | None, Durable | None]]) -> None:
        self._insert(
            JOB_COLUMNS,
            [_job_row(r) for r, _, _ in batch],
            " ON CONFLICT (run_id, task, item) DO UPDATE SET status=excluded.status, "
            "reason=excluded.reason, duration_s=excluded.duration_s, "
            "prompt_tokens=excluded.prompt_tokens, completion_tokens=excluded.completion_tokens, "
            "cached_tokens=excluded.cached_tokens, cost_usd=excluded.cost_usd, "
            "output=excluded.output, error=excluded.error, transcript=excluded.transcript, "
            "remembered=excluded.remembered, saved_tokens=excluded.saved_tokens, "
            "saved_usd=excluded.saved_usd, node=excluded.node, "
            "parent=COALESCE(excluded.parent, jobs.parent)",
        )
        calls = [c for r, _, _ in batch for c in self._calls.pop((r.run_id, r.task, r.item), ())]
        if calls:
            self._insert("INSERT INTO calls", calls)
        done_rows = [_done_row(r, done) for r, done, _ in batch if done is not None]
        if done_rows:
            self._insert(
                "INSERT OR REPLACE INTO done "
                "(task, item, fingerprint, parts, outputs, result, run_id, quick, tainted)",
                done_rows,
            )

    def record_call(
        self,
        run_id: str,
        task: str,
        item: str,
        step: int,
        model: str,
        usage: dict[str, int],
        seconds: float,
        cost_usd: float | None = None,
    ) -> None:
        """Keep a model call for the job's final transaction (finish_job, succeed_job, or
        close for a job left unfinished): a transaction per call would cost each model turn a
        write to the WAL and the system calls around it. A process killed outright (kill -9,
        a power cut) loses the call rows of the jobs it was running; Ctrl-C, SIGTERM and
        errors end every job through finish_job."""
        row = (
            run_id,
            task,
            item,
            step,
            model,
            usage.get("prompt", 0),
            usage.get("completion", 0),
            usage.get("cached", 0),
            seconds,
            cost_usd,
        )
        self._calls.setdefault((run_id, task, item), []).append(row)  # atomic under the GIL

    def spent_since(self, task: str | None, since: dt.datetime) -> float:
        """USD the ledger's jobs (of `task` and its sub-jobs `task<key>`, or all) that started
        since `since` cost (task names take no '<': `task<%` is no other task's)."""
        where = "julianday(started) >= julianday(?)"
        args: tuple[object, ...] = (since.isoformat(),)
        if task:
            where += " AND (task = ? OR task LIKE ? ESCAPE '\\')"
            like = task.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            args = (since.isoformat(), task, f"{like}<%")
        rows = self._query(f"SELECT COALESCE(SUM(cost_usd), 0) FROM jobs WHERE {where}", args)
        return float(rows[0][0])


def _job_row(r: JobRecord) -> tuple[object, ...]:
    """The jobs table's columns, in its order."""
    return (
        r.run_id,
        r.task,
        r.item,
        r.status,
        r.reason,
        r.started,
        r.duration_s,
        r.prompt_tokens,
        r.completion_tokens,
        r.cached_tokens,
        r.cost_usd,
        r.output,
        r.error,
        r.transcript,
        r.remembered,
        r.saved_tokens,
        r.saved_usd,
        r.node,
        r.parent,
    )


def _done_row(r: JobRecord, done: Done) -> tuple[object, ...]:
    return (
        done.task,
        done.item,
        done.fingerprint,
        done.parts_json,
        done.outputs_json,
        done.result,
        r.run_id,
        done.quick,
        done.tainted,
    )

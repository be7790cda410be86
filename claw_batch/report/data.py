"""What the run ledger says about a period, for `claw report`: runs, their jobs, and the
sums the page charts. Read-only: the ledger is opened for reading (store.database.read_only),
never created."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_batch.store import database, history

FAILED = ("failed", "limit", "interrupted", "error")  # how a job that ran can end badly
REMEMBERED = "remembered"  # a failed verdict given again, in the totals
STATUSES = ("ok", *FAILED, REMEMBERED, "skipped", "running")  # in the order totals list them

_JOB_COLUMNS = (
    "run_id, task, item, status, reason, started, duration_s, prompt_tokens, "
    "completion_tokens, cached_tokens, cost_usd, error, transcript"
)


@dataclass(frozen=True)
class JobSpan:
    """A job of a run; `started` is None for a job that did not run (skipped)."""

    run_id: str
    task: str
    item: str
    status: str
    reason: str | None
    started: dt.datetime | None
    duration_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None  # None: the model's price is unknown (or no call was made)
    error: str | None = None
    transcript: str | None = None  # relative to the project root
    remembered: str | None = None  # the run whose failed verdict this job gave again
    saved_tokens: int = 0  # what the turns the call cache replayed would have cost
    saved_usd: float | None = None
    node: str | None = None  # the cluster node it ran on (--executor ray); None: here

    @property
    def name(self) -> str:
        return f"{self.task}[{self.item}]" if self.item else self.task

    @property
    def whose(self) -> str:
        return history.whose(self.remembered)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def ended(self) -> dt.datetime | None:
        return self.started + dt.timedelta(seconds=self.duration_s) if self.started else None


@dataclass(frozen=True)
class RunSpan:
    id: str
    started: dt.datetime
    finished: dt.datetime | None
    status: str
    argv: str  # the command as typed: claw run -j 4
    jobs: tuple[JobSpan, ...]  # ran jobs by start, then the skipped ones
    trigger: str = "hand"  # hand, cron, schedule, watch, hook <name>

    @property
    def started_by(self) -> str:
        """hand, cron, schedule, watch or hook: what the report filters by."""
        return self.trigger.partition(" ")[0]

    @property
    def ended(self) -> dt.datetime:
        """The latest of its finish and its jobs' ends (a pinned clock stops time)."""
        ends = [j.ended for j in self.jobs if j.ended is not None]
        return max([self.started, *([self.finished] if self.finished else []), *ends])


@dataclass(frozen=True)
class Cell:
    """The jobs of one task on one day, or of a whole period."""

    jobs: int = 0
    tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0  # the sum of the known costs
    priced_jobs: int = 0  # jobs whose cost is known
    unpriced_jobs: int = 0  # jobs that used tokens at a price nobody knows
    unpriced_tokens: int = 0
    saved_tokens: int = 0  # replayed from the call cache instead of paid
    saved_usd: float = 0.0  # what of it has a known price

    def add(self, job: JobSpan) -> Cell:
        unpriced = job.cost_usd is None and job.tokens > 0
        return self + Cell(
            1,
            job.tokens,
            job.cached_tokens,
            job.cost_usd or 0.0,
            job.cost_usd is not None,
            unpriced,
            job.tokens if unpriced else 0,
            job.saved_tokens,
            job.saved_usd or 0.0,
        )

    def __add__(self, other: Cell) -> Cell:
        return Cell(
            self.jobs + other.jobs,
            self.tokens + other.tokens,
            self.cached_tokens + other.cached_tokens,
            self.cost_usd + other.cost_usd,
            self.priced_jobs + other.priced_jobs,
            self.unpriced_jobs + other.unpriced_jobs,
            self.unpriced_tokens + other.unpriced_tokens,
            self.saved_tokens + other.saved_tokens,
            self.saved_usd + other.saved_usd,
        )


@dataclass(frozen=True)
class Remembered:
    """A failed verdict given again `times` times in the period: one entry, not a failure
    each time (its run's failure is the one that counts)."""

    newest: JobSpan
    times: int


@dataclass(frozen=True)
class Period:
    since: dt.datetime
    now: dt.datetime
    runs: tuple[RunSpan, ...]  # newest first

    @property
    def jobs(self) -> list[JobSpan]:
        return [job for run in self.runs for job in run.jobs]

    @property
    def failures(self) -> list[JobSpan]:
        """Jobs that ran and ended badly, newest first; a verdict given again is not one."""
        return [job for job in self.jobs if job.status in FAILED and not job.remembered]

    @property
    def remembered(self) -> list[Remembered]:
        """The failed verdicts given again, one per job and verdict, newest first."""
        given: dict[tuple[str, str, str], list[JobSpan]] = {}
        for job in self.jobs:
            if job.remembered:
                given.setdefault((job.task, job.item, job.remembered), []).append(job)
        return [Remembered(jobs[0], len(jobs)) for jobs in given.values()]

    @property
    def days(self) -> list[dt.date]:
        """Every day from the first that ran a job (or the period's, if later) to today."""
        ran = [self.day_of(job.started) for job in self.jobs if job.started is not None]
        first = max(self.day_of(self.since), min(ran, default=self.now.date()))
        last = self.now.date()
        return [first + dt.timedelta(days=n) for n in range((last - first).days + 1)]

    def day_of(self, when: dt.datetime) -> dt.date:
        return when.astimezone(self.now.tzinfo).date()

    def by_task_and_day(self) -> dict[str, dict[dt.date, Cell]]:
        """Tasks by tokens used (most first), each with the days it ran a job (in order)."""
        cells: dict[str, dict[dt.date, Cell]] = {}
        for job in self.jobs:
            if job.started is not None:
                days = cells.setdefault(job.task, {})
                day = self.day_of(job.started)
                days[day] = days.get(day, Cell()).add(job)
        busiest = sorted(cells.items(), key=lambda kv: (-total(kv[1].values()).tokens, kv[0]))
        return {task: dict(sorted(days.items())) for task, days in busiest}

    def status_counts(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for job in self.jobs:
            status = REMEMBERED if job.remembered else job.status
            counts[status] = counts.get(status, 0) + 1
        return {status: n for status, n in counts.items() if n}


def total(cells: Iterable[Cell]) -> Cell:
    return sum(cells, Cell())


def gather(root: Path, since: dt.datetime, now: dt.datetime) -> Period:
    """The runs that started in [since, now] and their jobs, from `.claw/state.db`; the jobs
    a run skipped come from its `summary.json` (the ledger holds only jobs that ran)."""
    db_path = root / ".claw" / "state.db"
    if not db_path.exists():
        return Period(since, now, ())
    db = database.read_only(db_path)
    try:
        # ISO times with offsets do not sort as text across zones: a day's margin, then exact.
        rough = (since - dt.timedelta(days=1)).date().isoformat()
        trigger = history.column(db, "runs", "trigger")
        runs = [
            row
            for row in db.execute(
                f"SELECT id, started, finished, status, argv, {trigger} FROM runs "
                "WHERE started >= ?",
                (rough,),
            )
            if since <= _time(row[1]) <= now
        ]
        jobs = _jobs(db, rough, [row[0] for row in runs])
    finally:
        db.close()
    spans = [
        RunSpan(
            run_id,
            _time(started),
            _time(finished) if finished else None,
            status,
            history.typed(argv),
            (*jobs.get(run_id, ()), *_skipped(root, run_id)),
            history.trigger_of(argv, trigger),
        )
        for run_id, started, finished, status, argv, trigger in runs
    ]
    spans.sort(key=lambda run: (run.started, run.id), reverse=True)
    return Period(since, now, tuple(spans))


def _jobs(db: sqlite3.Connection, rough: str, run_ids: list[str]) -> dict[str, list[JobSpan]]:
    found: dict[str, list[JobSpan]] = {}
    wanted = set(run_ids)
    remembered = history.column(db, "jobs", "remembered")
    saved = (
        f"{history.column(db, 'jobs', 'saved_tokens')}, {history.column(db, 'jobs', 'saved_usd')}"
    )
    node = history.column(db, "jobs", "node")
    rows = db.execute(
        f"SELECT {_JOB_COLUMNS}, {remembered}, {saved}, {node} FROM jobs "
        "WHERE run_id IN (SELECT id FROM runs WHERE started >= ?) ORDER BY started, rowid",
        (rough,),
    )
    for row in rows:
        if row[0] in wanted:
            found.setdefault(row[0], []).append(_job(row))
    return found


def _job(row: tuple[Any, ...]) -> JobSpan:
    run_id, task, item, status, reason, started, duration, p, c, cached, cost, error, path = row[
        :13
    ]
    return JobSpan(
        run_id,
        task,
        item,
        status,
        reason,
        _time(started),
        float(duration or 0.0),
        p or 0,
        c or 0,
        cached or 0,
        cost,
        error,
        path,
        row[13],
        row[14] or 0,
        row[15],
        row[16],
    )


def _skipped(root: Path, run_id: str) -> list[JobSpan]:
    if "/" in run_id or run_id in ("", ".", ".."):  # a name, never a path
        return []
    path = root / ".claw" / "runs" / run_id / "summary.json"
    try:
        jobs = json.loads(path.read_text(encoding="utf-8")).get("jobs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [
        JobSpan(
            run_id, str(j["task"]), str(j.get("item") or ""), "skipped", j.get("reason"), None, 0
        )
        for j in jobs
        if isinstance(j, dict) and j.get("status") == "skipped" and "task" in j
    ]


def _time(text: str) -> dt.datetime:
    when = dt.datetime.fromisoformat(text)
    return when if when.tzinfo else when.astimezone()

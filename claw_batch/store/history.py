"""The run ledger read back: recent runs and the jobs that ran in them, for `claw log`
(which shows them: claw_batch.report.log)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_batch.errors import UsageError
from claw_batch.store import database, deliveries
from claw_batch.store.deliveries import DeliveryRow

HOOKS = ("pre-commit", "commit-msg", "pre-push")  # the git hooks claw serves
_SPAN = re.compile(r"(\d+)([mhdw])\Z")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True)
class JobRow:
    task: str
    item: str
    status: str
    reason: str | None
    duration_s: float | None
    tokens: int
    output: str | None
    error: str | None
    transcript: str | None
    cost_usd: float | None  # None: the model's price is not known
    remembered: str | None = None  # the run whose failed verdict this job gave again
    cached_tokens: int = 0  # of its prompt tokens, served from the provider's prefix cache
    saved_tokens: int = 0  # what the turns the call cache replayed would have cost
    saved_usd: float | None = None
    node: str | None = None  # the cluster node it ran on (--executor ray); None: here
    parent: str | None = None  # a sub-job's (`delegate`): its parent job's name

    @property
    def name(self) -> str:
        return f"{self.task}[{self.item}]" if self.item else self.task

    @property
    def whose(self) -> str:
        return whose(self.remembered)


@dataclass(frozen=True)
class RunRow:
    id: str
    started: str
    finished: str | None
    status: str
    exit_code: int | None
    argv: str  # as the ledger keeps it (an older claw kept the interpreter's path too)
    trigger: str  # hand, cron, schedule, watch, hook <name>
    jobs: tuple[JobRow, ...]
    # The provider batches the run submitted (claw_batch.store.batches): "id (status, n)".
    batches: tuple[str, ...] = ()
    # What its notices became (claw_batch.store.deliveries), in the order they were sent.
    deliveries: tuple[DeliveryRow, ...] = ()

    @property
    def command(self) -> str:
        return typed(self.argv)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started": self.started,
            "finished": self.finished,
            "status": self.status,
            "exit_code": self.exit_code,
            "trigger": self.trigger,
            "command": self.command,
            "argv": self.argv,
            "jobs": [job.__dict__ | {"name": job.name} for job in self.jobs],
            "batches": list(self.batches),
        } | ({"deliveries": [d.as_json() for d in self.deliveries]} if self.deliveries else {})


def whose(run_id: str | None) -> str:
    """`remembered (verdict of run X)`: how claw log, claw show and the report name a job
    that gave a failed verdict again (jobs.remembered)."""
    return f"remembered (verdict of run {run_id})"


def typed(argv: str) -> str:
    """The command as typed: `claw run -j 4`. A ledger of an older claw kept argv[0] as it
    was (`/home/u/.venv/bin/claw`, `/.../claw_batch/__main__.py`): it becomes `claw`."""
    first, _, rest = argv.partition(" ")
    if first == "claw" or "/" not in first:
        return argv
    return f"claw {rest}".rstrip()


def trigger_of(argv: str, trigger: str | None) -> str:
    """What started a run: the ledger's word, or for a run of an older claw (which did not
    keep it), what its command says."""
    if trigger:
        return trigger
    words = typed(argv).split()
    if words[1:3] == ["hook", "run"]:
        name = next((w for w in words[3:] if w in HOOKS), "")
        return f"hook {name}".rstrip()
    if words[1:2] in (["schedule"], ["watch"]):
        return words[1]
    return "cron" if words[1:2] == ["run"] and "--due" in words else "hand"


def _batches(db: sqlite3.Connection) -> dict[str, list[str]]:
    """The batches each run submitted, by run id: `batch_abc (done, 120 requests)`."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'batches'").fetchall():
        return {}
    found: dict[str, list[str]] = {}
    for run_id, batch_id, status, requests in db.execute(
        "SELECT run_id, batch_id, status, requests FROM batches WHERE batch_id IS NOT NULL "
        "ORDER BY rowid"
    ):
        said = f"{batch_id} ({status}, {requests} request{'s' * (requests != 1)})"
        found.setdefault(run_id, []).append(said)
    return found


def column(db: sqlite3.Connection, table: str, name: str) -> str:
    """`name` in a SELECT of `table`, or NULL in a ledger from before the column (a read-only
    open never adds it): schema.ADDED."""
    columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    return name if name in columns else "NULL"


def since(text: str, now: dt.datetime) -> dt.datetime:
    """`30m`, `12h`, `7d`, `2w`, or an ISO date/time."""
    found = _SPAN.match(text.strip())
    if found:
        return now - dt.timedelta(**{_UNITS[found[2]]: int(found[1])})
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r}: use e.g. 12h, 7d, 2w or 2026-11-22") from None
    return when if when.tzinfo else when.astimezone()


def runs(
    db_path: Path,
    *,
    task: str | None = None,
    after: dt.datetime | None = None,
    limit: int = 20,
    run_id: str | None = None,
) -> list[RunRow]:
    """The latest runs (newest first) that ran a job, or any run when no task is given; with
    `run_id`, that run alone."""
    if not db_path.exists():
        return []
    db = database.read_only(db_path)
    try:
        where, args = [], []
        if task is not None:
            # its jobs, and its sub-jobs (`TASK<digest>`: claw_batch.run.delegation)
            where.append("id IN (SELECT run_id FROM jobs WHERE task = ? OR substr(task, 1, ?) = ?)")
            args += [task, len(task) + 1, task + "<"]
        if run_id is not None:
            where.append("id = ?")
            args.append(run_id)
        rows = db.execute(
            "SELECT id, started, finished, status, exit_code, argv, "
            f"{column(db, 'runs', 'trigger')} FROM runs"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + " ORDER BY rowid DESC",
            args,
        ).fetchall()
        found: list[RunRow] = []
        batched = _batches(db)
        notices = deliveries.by_run(db)
        for row in rows:
            if after is not None and dt.datetime.fromisoformat(row[1]) < after:
                continue
            run_id, started, finished, status, exit_code, argv, trigger = row
            ran = _jobs(db, run_id, task)
            by = trigger_of(argv, trigger)
            sent = tuple(batched.get(run_id, ()))
            told = tuple(notices.get(run_id, ()))
            found.append(
                RunRow(run_id, started, finished, status, exit_code, argv, by, ran, sent, told)
            )
            if len(found) >= limit:
                break
        return found
    finally:
        db.close()


def last_with_jobs(db_path: Path) -> str | None:
    """The newest run that ran a job (a remembered verdict is one): what `claw show last`
    shows. None without a ledger or such a run."""
    if not db_path.exists():
        return None
    db = database.read_only(db_path)
    try:
        row = db.execute(
            "SELECT id FROM runs WHERE id IN (SELECT run_id FROM jobs) ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
    finally:
        db.close()
    return str(row[0]) if row else None


def _jobs(db: sqlite3.Connection, run_id: str, task: str | None) -> tuple[JobRow, ...]:
    """The jobs of run `run_id` (of `task` only, and their sub-jobs, if given), in the
    order they ended."""
    rows = db.execute(
        "SELECT task, item, status, reason, duration_s, "
        "prompt_tokens + completion_tokens, output, error, transcript, cost_usd, "
        f"{column(db, 'jobs', 'remembered')}, cached_tokens, "
        f"{column(db, 'jobs', 'saved_tokens')}, {column(db, 'jobs', 'saved_usd')}, "
        f"{column(db, 'jobs', 'node')}, {column(db, 'jobs', 'parent')} "
        "FROM jobs WHERE run_id = ? ORDER BY rowid",
        (run_id,),
    ).fetchall()
    jobs = tuple(_job_row(j) for j in rows)
    return jobs if task is None else _of_task(jobs, task)


def _of_task(jobs: tuple[JobRow, ...], task: str) -> tuple[JobRow, ...]:
    """The jobs of `task` (its sub-jobs', `TASK<digest>`, too), and the sub-jobs they
    started (and theirs)."""
    names = {job.name for job in jobs if job.task == task or job.task.startswith(task + "<")}
    grown = True
    while grown:  # a sub-job's own sub-jobs too, whatever order the rows are in
        more = {job.name for job in jobs if job.parent in names} - names
        names |= more
        grown = bool(more)
    return tuple(job for job in jobs if job.name in names)


def _job_row(j: Any) -> JobRow:
    """A row of _jobs' SELECT: what the call cache saved, then the node and the parent."""
    *head, saved_tokens, saved_usd, node, parent = j
    return dataclasses.replace(
        JobRow(*head),
        saved_tokens=saved_tokens or 0,
        saved_usd=saved_usd,
        node=node,
        parent=parent,
    )

"""The run ledger read back: recent runs and the jobs that ran in them, for `claw log`
(which shows them: claw_batch.report.log)."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_batch.errors import UsageError

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

    @property
    def name(self) -> str:
        return f"{self.task}[{self.item}]" if self.item else self.task


@dataclass(frozen=True)
class RunRow:
    id: str
    started: str
    finished: str | None
    status: str
    exit_code: int | None
    argv: str
    jobs: tuple[JobRow, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started": self.started,
            "finished": self.finished,
            "status": self.status,
            "exit_code": self.exit_code,
            "argv": self.argv,
            "jobs": [job.__dict__ | {"name": job.name} for job in self.jobs],
        }


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
    db_path: Path, *, task: str | None = None, after: dt.datetime | None = None, limit: int = 20
) -> list[RunRow]:
    """The latest runs (newest first) that ran a job, or any run when no task is given."""
    if not db_path.exists():
        return []
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        where, args = [], []
        if task is not None:
            where.append("id IN (SELECT run_id FROM jobs WHERE task = ?)")
            args.append(task)
        rows = db.execute(
            "SELECT id, started, finished, status, exit_code, argv FROM runs"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + " ORDER BY rowid DESC",
            args,
        ).fetchall()
        found: list[RunRow] = []
        for row in rows:
            if after is not None and dt.datetime.fromisoformat(row[1]) < after:
                continue
            only = " AND task = ?" if task else ""
            jobs = db.execute(
                "SELECT task, item, status, reason, duration_s, "
                "prompt_tokens + completion_tokens, output, error, transcript, cost_usd "
                f"FROM jobs WHERE run_id = ?{only} ORDER BY rowid",
                (row[0], task) if task else (row[0],),
            ).fetchall()
            run_id, started, finished, status, exit_code, argv = row
            ran = tuple(JobRow(*j) for j in jobs)
            found.append(RunRow(run_id, started, finished, status, exit_code, argv, ran))
            if len(found) >= limit:
                break
        return found
    finally:
        db.close()

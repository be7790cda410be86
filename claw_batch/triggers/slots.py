"""The slot ledger in `.claw/state.db`: every schedule slot `claw run --due` or `claw
schedule` ran or recorded as missed. A slot is written before its run starts, in one
transaction, under the project lock: whatever happens next, it never runs twice."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from claw_batch.store.state import State
from claw_batch.triggers.cron import Due

SCHEMA = """
CREATE TABLE IF NOT EXISTS slots (
    task TEXT NOT NULL,
    slot TEXT NOT NULL,            -- schedule.Slot.name
    at TEXT NOT NULL,              -- its instant, UTC ISO 8601
    status TEXT NOT NULL,          -- running | ok | failed | limit | interrupted | error | missed
    missed INTEGER NOT NULL,       -- earlier slots collapsed into this one (or skipped with it)
    run_id TEXT,
    recorded TEXT NOT NULL,
    PRIMARY KEY (task, slot)
);
CREATE INDEX IF NOT EXISTS slots_by_time ON slots (task, at);
"""


@dataclass(frozen=True)
class Entry:
    task: str
    due: Due


class Slots:
    def __init__(self, state: State | None, *, readonly: bool) -> None:
        self.state = state
        self.exists = state is not None and _has_table(state)
        if state is not None and not readonly and not self.exists:
            state.db.executescript(SCHEMA)
            self.exists = True

    def seen(self, task: str, name: str) -> bool:
        if not self.exists or self.state is None:
            return False
        rows = self.state.db.execute(
            "SELECT 1 FROM slots WHERE task = ? AND slot = ?", (task, name)
        ).fetchall()
        return bool(rows)

    def last(self, task: str) -> dt.datetime | None:
        if not self.exists or self.state is None:
            return None
        row = self.state.db.execute("SELECT max(at) FROM slots WHERE task = ?", (task,)).fetchone()
        return dt.datetime.fromisoformat(row[0]) if row and row[0] else None

    def record(self, entries: list[Entry], run_id: str | None, now: dt.datetime) -> None:
        """Write the slots before anything runs: due ones `running`, skipped ones `missed`."""
        assert self.state is not None
        with self.state.transaction():
            self.state.db.executemany(
                "INSERT INTO slots VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        e.task,
                        e.due.slot.name,
                        e.due.slot.at.isoformat(),
                        "running" if e.due.run else "missed",
                        e.due.missed,
                        run_id if e.due.run else None,
                        now.isoformat(),
                    )
                    for e in entries
                ],
            )

    def forget(self, entries: list[Entry]) -> None:
        """Take back slots `record` wrote for a run that stopped before any job."""
        assert self.state is not None
        with self.state.transaction():
            self.state.db.executemany(
                "DELETE FROM slots WHERE task = ? AND slot = ?",
                [(e.task, e.due.slot.name) for e in entries],
            )

    def finish(self, task: str, name: str, status: str) -> None:
        assert self.state is not None
        with self.state.transaction():
            self.state.db.execute(
                "UPDATE slots SET status = ? WHERE task = ? AND slot = ?", (status, task, name)
            )


def _has_table(state: State) -> bool:
    rows = state.db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'slots'"
    ).fetchall()
    return bool(rows)

"""The ledger of sends (`notify:`): each delivery a run tried, whether it arrived, and the
digest of what it reported, so that `changed` compares against the last notice that was
*delivered* (a failed one is compared against again next time) and `claw log` can say
which failed. Created by this module when first used, as the verdicts' table is."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from claw_batch.store.state import State

SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    delivery TEXT NOT NULL,        -- a digest of the delivery's definition: stable, not secret
    target TEXT NOT NULL,          -- config.Delivery.target: nothing secret
    event TEXT NOT NULL,           -- what fired it: failed | limit | ok | changed
    ok INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    error TEXT,                    -- the last attempt's, redacted
    sent_at TEXT NOT NULL,
    digest TEXT NOT NULL           -- of what the notice reported (the outputs' content)
);
CREATE INDEX IF NOT EXISTS deliveries_last ON deliveries (task, delivery, ok);
"""


@dataclass(frozen=True)
class DeliveryRow:
    run_id: str
    task: str
    delivery: str
    target: str
    event: str
    ok: bool
    attempts: int
    error: str | None
    sent_at: str
    digest: str

    def as_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "target": self.target,
            "event": self.event,
            "ok": self.ok,
            "attempts": self.attempts,
            "error": self.error,
            "sent_at": self.sent_at,
        }


class Deliveries:
    def __init__(self, state: State) -> None:
        self.state = state
        if not state.readonly:  # a dry run reads what is there
            with state.transaction():
                _create(state)

    def _exists(self) -> bool:
        return not self.state.readonly or self.state.has_table("deliveries")

    def last_delivered(self, task: str, delivery: str) -> str | None:
        """The digest of the last notice of `task` that `delivery` delivered."""
        if not self._exists():
            return None
        rows = self.state.select(
            "SELECT digest FROM deliveries WHERE task = ? AND delivery = ? AND ok = 1 "
            "ORDER BY rowid DESC LIMIT 1",
            (task, delivery),
        )
        return str(rows[0][0]) if rows else None

    def outputs_digest(self, task: str, ran: Container[str], digest: int) -> int:
        """`digest` (of this run's answers, by item: `answer_digest`) with those of the task's
        items that are not in `ran`, from their last successes in the ledger (`done`): every
        item's current output, whatever subset ran. One read, a row at a time."""
        total = digest

        def add(row: tuple[Any, ...]) -> None:
            nonlocal total
            item, result = row
            if item not in ran:
                total = (total + answer_digest(item, result)) % MODULUS

        self.state.each("SELECT item, result FROM done WHERE task = ?", (task,), add)
        return total

    def add(self, row: DeliveryRow) -> None:
        with self.state.transaction():
            self.state.db.execute(
                "INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.run_id,
                    row.task,
                    row.delivery,
                    row.target,
                    row.event,
                    int(row.ok),
                    row.attempts,
                    row.error,
                    row.sent_at,
                    row.digest,
                ),
            )


MODULUS = 1 << 256  # the digest of a task's outputs: a sum, whatever order its jobs end in


def answer_digest(item: str, text: str) -> int:
    """One job's answer, as a term of the digest of its task's outputs."""
    return int.from_bytes(hashlib.sha256(f"{item}\0{text}".encode()).digest(), "big")


def _create(state: State) -> None:
    for statement in SCHEMA.split(";"):
        if statement.strip():
            state.db.execute(statement)


def by_run(db: sqlite3.Connection) -> dict[str, list[DeliveryRow]]:
    """Every delivery the ledger holds, by run id, in the order they were recorded (`claw
    log`); none in a ledger from before the table."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'deliveries'").fetchall():
        return {}
    found: dict[str, list[DeliveryRow]] = {}
    for row in db.execute(
        "SELECT run_id, task, delivery, target, event, ok, attempts, error, sent_at, digest "
        "FROM deliveries ORDER BY rowid"
    ):
        run_id, task, delivery, target, event, ok, attempts, error, sent_at, digest = row
        done = DeliveryRow(
            run_id, task, delivery, target, event, bool(ok), attempts, error, sent_at, digest
        )
        found.setdefault(run_id, []).append(done)
    return found

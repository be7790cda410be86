"""Failed check verdicts, kept by fingerprint: a `check: true` task whose verdict was
`ok: false` is not done (it reruns until it passes), but while nothing it reads has changed —
the same staged tree for a pre-commit review — the verdict is the same, and the next run
gives it again without a model call (`-B` asks anew)."""

from __future__ import annotations

from typing import NamedTuple

from claw_batch.store.state import State

SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    task TEXT NOT NULL,
    item TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    verdict TEXT NOT NULL,         -- the check's final answer, JSON
    run_id TEXT NOT NULL,
    PRIMARY KEY (task, item)
);
"""


class Verdict(NamedTuple):
    text: str  # the check's final answer, JSON
    run_id: str  # the run that asked the model
    started: str | None  # when that run started (ISO 8601); None: the ledger lost the run


class Verdicts:
    def __init__(self, state: State) -> None:
        self.state = state
        if not state.readonly:  # a dry run (claw why, claw list) reads what is there
            with state.transaction():
                state.db.execute(SCHEMA)

    def get(self, task: str, item: str, fingerprint: str) -> Verdict | None:
        """The failed check with this fingerprint."""
        if self.state.readonly and not self.state.has_table("verdicts"):
            return None
        rows = self.state.select(
            "SELECT v.verdict, v.run_id, r.started FROM verdicts v "
            "LEFT JOIN runs r ON r.id = v.run_id "
            "WHERE v.task = ? AND v.item = ? AND v.fingerprint = ?",
            (task, item, fingerprint),
        )
        return Verdict(*rows[0]) if rows else None

    def held(self, task: str, item: str) -> bool:
        """Whether a failed check of the job is kept, whatever its fingerprint."""
        if self.state.readonly and not self.state.has_table("verdicts"):
            return False
        rows = self.state.select("SELECT 1 FROM verdicts WHERE task = ? AND item = ?", (task, item))
        return bool(rows)

    def put(self, task: str, item: str, fingerprint: str, verdict: str, run_id: str) -> None:
        with self.state.transaction():
            self.state.db.execute(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?)",
                (task, item, fingerprint, verdict, run_id),
            )

    def forget(self, task: str, item: str) -> None:
        with self.state.transaction():
            self.state.db.execute("DELETE FROM verdicts WHERE task = ? AND item = ?", (task, item))

"""Failed check verdicts, kept by fingerprint: a `check: true` task whose verdict was
`ok: false` is not done (it reruns until it passes), but while nothing it reads has changed —
the same staged tree for a pre-commit review — the verdict is the same, and the next run
gives it again without a model call (`-B` asks anew)."""

from __future__ import annotations

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


class Verdicts:
    def __init__(self, state: State) -> None:
        self.state = state
        with state.transaction():
            state.db.execute(SCHEMA)

    def get(self, task: str, item: str, fingerprint: str) -> tuple[str, str] | None:
        """(verdict, run id) of the failed check with this fingerprint."""
        with self.state.transaction():
            row = self.state.db.execute(
                "SELECT verdict, run_id FROM verdicts WHERE task = ? AND item = ? "
                "AND fingerprint = ?",
                (task, item, fingerprint),
            ).fetchone()
        return (row[0], row[1]) if row else None

    def put(self, task: str, item: str, fingerprint: str, verdict: str, run_id: str) -> None:
        with self.state.transaction():
            self.state.db.execute(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?)",
                (task, item, fingerprint, verdict, run_id),
            )

    def forget(self, task: str, item: str) -> None:
        with self.state.transaction():
            self.state.db.execute("DELETE FROM verdicts WHERE task = ? AND item = ?", (task, item))

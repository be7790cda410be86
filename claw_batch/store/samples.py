"""Which answer each job asks the call cache for (llm.callcache): its sample index, 0 until
`-B` asks for a fresh answer. Kept per job so that a forced run that is killed and run again
without `-B` replays the forced run's paid turns, and a plain rerun keeps its index."""

from __future__ import annotations

from claw_batch.store.state import State

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    task TEXT NOT NULL,
    item TEXT NOT NULL,
    sample INTEGER NOT NULL,       -- the call cache's sample index of the job's requests
    PRIMARY KEY (task, item)
);
"""


class Samples:
    def __init__(self, state: State) -> None:
        self.state = state
        with state.transaction():
            state.db.execute(SCHEMA)
        # Until some -B ran, every job's index is 0: no query a job (under the project lock,
        # nobody else writes the table meanwhile).
        self.empty = not state.select("SELECT 1 FROM samples LIMIT 1")

    def get(self, task: str, item: str) -> int:
        if self.empty:
            return 0
        rows = self.state.select(
            "SELECT sample FROM samples WHERE task = ? AND item = ?", (task, item)
        )
        return int(rows[0][0]) if rows else 0

    def bump(self, task: str, item: str) -> int:
        """The next index, written before the job's first call."""
        sample = self.get(task, item) + 1
        with self.state.transaction():
            self.state.db.execute(
                "INSERT OR REPLACE INTO samples VALUES (?, ?, ?)", (task, item, sample)
            )
        self.empty = False
        return sample

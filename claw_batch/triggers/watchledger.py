"""The watch ledger in `.claw/state.db`: which contents each watch task has processed. Its key
is the task, the file's sha256 and the task's own digest (its definition and prompt), so
the same bytes dropped again, under any name, are not processed again — until the task or
its prompt changes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from claw_batch.config import Project
from claw_batch.plan.fingerprint import digest, task_digest
from claw_batch.store.state import State

SCHEMA = """
CREATE TABLE IF NOT EXISTS watched (
    task TEXT NOT NULL,
    content TEXT NOT NULL,         -- sha256 of the file
    key TEXT NOT NULL,             -- watch_key: the task's definition and prompt
    status TEXT NOT NULL,          -- ok | failed
    path TEXT NOT NULL,            -- where the file was when it was processed
    run_id TEXT NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (task, content, key)
);
"""


@dataclass(frozen=True)
class Handled:
    task: str
    content: str
    key: str
    status: str  # ok | failed
    path: str
    run_id: str
    at: str


def watch_key(project: Project, task: str) -> str:
    """What, besides the file, decides a watch job's result."""
    definition = project.config.tasks[task].definition
    return digest([task_digest(definition), project.prompt_source(task)[0]])


class WatchLedger:
    def __init__(self, state: State) -> None:
        self.state = state
        with state.transaction():
            state.db.execute(SCHEMA)

    def get(self, task: str, content: str, key: str) -> Handled | None:
        row = self.state.db.execute(
            "SELECT * FROM watched WHERE task = ? AND content = ? AND key = ?",
            (task, content, key),
        ).fetchone()
        return Handled(*row) if row else None

    def record(self, handled: Iterable[Handled]) -> None:
        with self.state.transaction():
            self.state.db.executemany(
                "INSERT OR REPLACE INTO watched VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(h.task, h.content, h.key, h.status, h.path, h.run_id, h.at) for h in handled],
            )

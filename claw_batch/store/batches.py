"""The batch journal: which requests went to which provider batch, and the replies that came
back, kept in the ledger so that no request is paid twice (claw_batch.llm.batch).

A batch's input file is journalled as soon as it is uploaded, with the custom_id of every
request it holds; its batch id as soon as the batch is created, before any polling. A run
killed meanwhile leaves the rows; the next run whose job makes one of those requests
re-attaches to the batch instead of uploading it again. Replies downloaded are kept until
the result of the job that asked is recorded (`settled`): a job stopped in its third round
(a kill, Ctrl-C, --batch-wait) finds the replies of its first two at the next run, and pays
them once. A request whose line did not complete (an expired or cancelled batch) is dropped,
so that it is submitted anew. Rows older than MAX_AGE are ignored and dropped: a reply made
days ago never answers today's request. Replies are kept redacted, as every sink is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from claw_batch.store.database import Database

MAX_AGE = 48 * 3600.0  # seconds a journalled request or reply is good for (a batch: 24 h at most)

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    endpoint TEXT NOT NULL,        -- the base URL, without credentials
    input_file_id TEXT NOT NULL,
    batch_id TEXT,                 -- NULL: uploaded, the batch not created yet
    status TEXT NOT NULL,          -- uploaded, then the provider's: in_progress, completed...
    run_id TEXT NOT NULL,          -- the run that submitted it
    requests INTEGER NOT NULL,
    PRIMARY KEY (endpoint, input_file_id)
);
CREATE TABLE IF NOT EXISTS batch_requests (
    endpoint TEXT NOT NULL,
    custom_id TEXT NOT NULL,
    input_file_id TEXT NOT NULL,
    job TEXT NOT NULL,
    completion TEXT,               -- the reply, JSON (llm.cassette.completion_json), once in
    at REAL NOT NULL DEFAULT 0,    -- when submitted, then when its reply came (epoch seconds)
    PRIMARY KEY (endpoint, custom_id)
);
"""


class Found(NamedTuple):
    input_file_id: str
    batch_id: str | None
    status: str
    completion: str | None


class Journal:
    """The journal of one endpoint's batches."""

    def __init__(self, db: Database, endpoint: str, now: float) -> None:
        """`now`: the run's clock (epoch seconds), which ages the rows."""
        self.db = db
        self.endpoint = endpoint
        self.now = now
        with db.transaction():
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.db.execute(statement)
            columns = [row[1] for row in db.db.execute("PRAGMA table_info(batch_requests)")]
            if "at" not in columns:  # a journal of the first batch release
                db.db.execute("ALTER TABLE batch_requests ADD COLUMN at REAL NOT NULL DEFAULT 0")
            db.db.execute(
                "DELETE FROM batch_requests WHERE endpoint = ? AND at < ?",
                (endpoint, now - MAX_AGE),
            )

    def find(self, custom_id: str) -> Found | None:
        rows = self.db.select(
            "SELECT r.input_file_id, b.batch_id, b.status, r.completion FROM batch_requests r "
            "JOIN batches b ON b.endpoint = r.endpoint AND b.input_file_id = r.input_file_id "
            "WHERE r.endpoint = ? AND r.custom_id = ? AND r.at >= ?",
            (self.endpoint, custom_id, self.now - MAX_AGE),
        )
        return Found(*rows[0]) if rows else None

    def submitted(
        self, input_file_id: str, run_id: str, requests: Iterable[tuple[str, str]]
    ) -> None:
        """An uploaded file of `requests` (custom_id, job), before its batch is created."""
        rows = list(requests)
        with self.db.transaction(durable=True):
            self.db.db.execute(
                "INSERT OR REPLACE INTO batches VALUES (?, ?, NULL, 'uploaded', ?, ?)",
                (self.endpoint, input_file_id, run_id, len(rows)),
            )
            self.db.db.executemany(
                "INSERT OR REPLACE INTO batch_requests VALUES (?, ?, ?, ?, NULL, ?)",
                [(self.endpoint, cid, input_file_id, job, self.now) for cid, job in rows],
            )

    def created(self, input_file_id: str, batch_id: str, status: str) -> None:
        with self.db.transaction(durable=True):
            self.db.db.execute(
                "UPDATE batches SET batch_id = ?, status = ? WHERE endpoint = ? "
                "AND input_file_id = ?",
                (batch_id, status, self.endpoint, input_file_id),
            )

    def status(self, input_file_id: str, status: str) -> None:
        with self.db.transaction():
            self.db.db.execute(
                "UPDATE batches SET status = ? WHERE endpoint = ? AND input_file_id = ?",
                (status, self.endpoint, input_file_id),
            )

    def finished(self, input_file_id: str, completions: Mapping[str, str], status: str) -> None:
        """The batch is over (`status`: completed, expired...): its replies kept, its requests
        without one dropped."""
        with self.db.transaction():
            self.db.db.executemany(
                "UPDATE batch_requests SET completion = ?, at = ? WHERE endpoint = ? "
                "AND custom_id = ? AND input_file_id = ?",
                [
                    (text, self.now, self.endpoint, cid, input_file_id)
                    for cid, text in completions.items()
                ],
            )
            self.db.db.execute(
                "DELETE FROM batch_requests WHERE endpoint = ? AND input_file_id = ? "
                "AND completion IS NULL",
                (self.endpoint, input_file_id),
            )
            self.db.db.execute(
                "UPDATE batches SET status = ? WHERE endpoint = ? AND input_file_id = ?",
                (status, self.endpoint, input_file_id),
            )

    def forget(self, input_file_id: str) -> None:
        """A batch the endpoint no longer knows (or never made): its requests go again."""
        with self.db.transaction():
            for table in ("batch_requests", "batches"):
                self.db.db.execute(
                    f"DELETE FROM {table} WHERE endpoint = ? AND input_file_id = ?",
                    (self.endpoint, input_file_id),
                )

    def settled(self, jobs: Iterable[str]) -> None:
        """The results of `jobs` are recorded: their replies are not needed any longer. Their
        requests still in a batch stay (the batch is paid for: a later run of the job takes
        their replies), until they age out."""
        with self.db.transaction():
            self.db.db.executemany(
                "DELETE FROM batch_requests WHERE endpoint = ? AND job = ? "
                "AND completion IS NOT NULL",
                [(self.endpoint, job) for job in jobs],
            )

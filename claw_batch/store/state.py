"""`.claw/state.db`: the run ledger (runs, jobs, model calls) in SQLite with WAL.

A corrupt ledger is moved aside by a `claw run`, which starts a new one; a write SQLite cannot
make (a full disk) raises ClawError and leaves nothing of its transaction (see ledgerfile).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from claw_batch.errors import ClawError
from claw_batch.llm.usage import Usage
from claw_batch.store import ledgerfile
from claw_batch.store.ledgerfile import Corrupt

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    started TEXT NOT NULL,
    finished TEXT,
    status TEXT NOT NULL,          -- running | ok | failed | limit | interrupted | error
    exit_code INTEGER,
    argv TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    run_id TEXT NOT NULL REFERENCES runs(id),
    task TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,          -- running | ok | failed | limit | interrupted
    reason TEXT,
    started TEXT NOT NULL,
    duration_s REAL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL,
    output TEXT,
    error TEXT,
    transcript TEXT,
    PRIMARY KEY (run_id, task, item)
);
-- The last successful run of each job: what make calls the up-to-date check. A row exists
-- only after the job's outputs are on disk; it is deleted when the job starts again.
CREATE TABLE IF NOT EXISTS done (
    task TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    fingerprint TEXT NOT NULL,
    parts TEXT NOT NULL,           -- JSON: the fingerprint's components, for `claw why`
    outputs TEXT NOT NULL,         -- JSON: {path: sha256} of the outputs as written
    result TEXT NOT NULL,          -- the final answer, for needs.X.result downstream
    run_id TEXT NOT NULL,
    quick TEXT,                    -- prepare.TaskKey.quick: up to date by stat keys alone
    tainted TEXT,                  -- the outside content the job read (its result is fenced)
    PRIMARY KEY (task, item)
);
-- Files that hold outside content (claw_batch.taint.ledger): a job that had read some wrote
-- `path`; while its content is `sha256`, whatever reads it gets it fenced.
CREATE TABLE IF NOT EXISTS tainted (
    path TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    source TEXT NOT NULL,          -- the outside content the writing job had read
    task TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL
);
-- The git blob ids of every content a row of `tainted` was ever about: committed, git's
-- object store keeps it after the file changes (claw_batch.taint.staged.stored).
CREATE TABLE IF NOT EXISTS tainted_blobs (
    blob TEXT PRIMARY KEY,
    path TEXT NOT NULL             -- the file it was, as a fence names it
);
-- The stat shortcut: a file is re-hashed only when its mtime, size, inode or ctime changed
-- (a command can set the first three back, not the ctime). A path that is not UTF-8 is
-- kept as a BLOB of its bytes (`stored_path`), here and in `tainted`.
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    ctime_ns INTEGER               -- NULL: hashed by a claw that did not look (hash again)
);
-- A job that starts forgets its last success in the statement that marks it running (see
-- State.start_job).
CREATE TRIGGER IF NOT EXISTS forget_done AFTER INSERT ON jobs WHEN NEW.status = 'running'
BEGIN
    DELETE FROM done WHERE task = NEW.task AND item = NEW.item;
END;
CREATE TABLE IF NOT EXISTS calls (
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    step INTEGER NOT NULL,
    model TEXT,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL,
    seconds REAL,
    cost_usd REAL                  -- NULL: the model's price is not known
);
"""

INSERT_CALL = "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# Parameters in one statement: the limit of SQLite before 3.32 (later ones allow 32766).
MAX_PARAMS = 999


class JobEnd(Protocol):
    """How a job ended, as the ledger keeps it (claw_batch.run.results.JobResult)."""

    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def cost_usd(self) -> float | None: ...
    @property
    def output(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def transcript(self) -> str: ...


@dataclass(frozen=True)
class JobRecord:
    run_id: str
    task: str
    item: str
    status: str
    reason: str | None
    started: str
    duration_s: float
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float | None
    output: str | None
    error: str | None
    transcript: str | None

    @classmethod
    def of(cls, run_id: str, task: str, item: str, started: str, end: JobEnd) -> JobRecord:
        """The row of the job (`task`, `item`) of run `run_id`, started at `started`, that
        ended as `end` says."""
        usage = end.usage
        return cls(
            run_id,
            task,
            item,
            end.status,
            end.reason,
            started,
            end.duration_s,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            end.cost_usd,
            end.output,
            end.error,
            end.transcript,
        )


Entry = tuple[int, int, int, int | None, str]  # mtime_ns, size, inode, ctime_ns, sha256


def stored_path(rel: str) -> str | bytes:
    """A path as the ledger keeps it: as text, or when it is not UTF-8 (a name decoded with
    surrogateescape, which SQLite's text refuses) as a BLOB of its bytes. A BLOB never
    equals a text, so the two forms cannot name the same row."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(rel)
    return rel


def loaded_path(value: str | bytes) -> str:
    """`stored_path` undone: the name as os functions take it."""
    return os.fsdecode(value) if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Done:
    """A job's last success. Its outputs and fingerprint parts are kept as JSON and parsed
    when asked: a no-op over 10,000 jobs that pass the quick check needs neither."""

    task: str
    item: str
    fingerprint: str
    parts_json: str
    outputs_json: str
    result: str
    quick: str | None = None  # plan.quickcheck.TaskKey.seal: a digest, then the output paths
    tainted: str | None = None  # the outside content the job read (claw_batch.taint.jobtaint)

    @classmethod
    def of(
        cls,
        task: str,
        item: str,
        fingerprint: str,
        parts: dict[str, Any],
        outputs: dict[str, str],
        result: str,
        quick: str | None = None,
        tainted: str | None = None,
    ) -> Done:
        parts_json, outputs_json = json.dumps(parts), json.dumps(outputs)
        return cls(task, item, fingerprint, parts_json, outputs_json, result, quick, tainted)

    @functools.cached_property
    def parts(self) -> dict[str, Any]:
        parts: dict[str, Any] = json.loads(self.parts_json)
        return parts

    @functools.cached_property
    def outputs(self) -> dict[str, str]:
        """path -> sha256, as written."""
        outputs: dict[str, str] = json.loads(self.outputs_json)
        return outputs


class State:
    def __init__(self, path: Path, *, readonly: bool = False, recover: bool = False) -> None:
        """Open (and create) the state; `readonly` opens an existing one without writing
        anything, for `claw plan`, `claw why` and `claw list`. `recover` (a `claw run`, under
        the project lock) moves a corrupt ledger aside and starts a new one; `recovered` then
        says so. Otherwise a corrupt ledger raises ClawError."""
        self.path = path
        self.shown = ledgerfile.shown(path)
        self.readonly = readonly
        self.recovered: str | None = None
        self._lock = threading.RLock()
        # A job's model calls, kept until its final transaction (see record_call).
        self._calls: dict[tuple[str, str, str], list[tuple[object, ...]]] = {}
        # Ended jobs not yet written, and whether a thread is writing them (see _end_job).
        self._ends: list[tuple[JobRecord, Done | None]] = []
        self._ends_lock = threading.Lock()
        self._writing = False
        try:
            if readonly:
                self._open_readonly(path)
                return
            self._open(path)
        except Corrupt as e:
            self.db.close()
            if readonly or not recover:
                raise ClawError(ledgerfile.unusable(path, e)) from None
            aside = ledgerfile.move_aside(path)
            self.recovered = (
                f"ledger {self.shown} was corrupt ({e}): moved it to "
                f"{path.parent.name}/{aside.name} and started a new one; every job runs again"
            )
            self._open(path)

    def _open_readonly(self, path: Path) -> None:
        # With no WAL left behind, open it as immutable: SQLite then creates no -wal/-shm
        # files, so a dry run leaves .claw/ byte for byte as it was.
        wal = path.with_name(path.name + "-wal").exists()
        mode = "mode=ro" if wal else "immutable=1"
        self.db = sqlite3.connect(f"file:{path}?{mode}", uri=True, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        ledgerfile.checked(lambda: ledgerfile.verify(self.db, pages=()), path)
        self.has_quick = self._has_quick()  # read-only: an old state.db stays old
        self.has_taint = self._has_column("done", "tainted")
        self.has_ctime = self._has_column("files", "ctime_ns")

    def _open(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        ledgerfile.checked(lambda: self._setup(path), path)

    def _setup(self, path: Path) -> None:
        # First: a corrupt ledger is moved aside as it was found.
        ledgerfile.verify(self.db, pages=ledgerfile.pages_to_check(path))
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        if not self._has_quick():  # a state.db from before the quick check
            self.db.execute("ALTER TABLE done ADD COLUMN quick TEXT")
        if not self._has_column("calls", "cost_usd"):  # ... or before cost accounting
            self.db.execute("ALTER TABLE calls ADD COLUMN cost_usd REAL")
        if not self._has_column("done", "tainted"):  # ... or before taint (SCHEMA made its table)
            self.db.execute("ALTER TABLE done ADD COLUMN tainted TEXT")
        if not self._has_column("files", "ctime_ns"):  # ... or before the ctime was kept
            self.db.execute("ALTER TABLE files ADD COLUMN ctime_ns INTEGER")
        self.has_quick = self.has_taint = self.has_ctime = True

    def _checked(self, fn: Callable[[], T]) -> T:
        """`fn` on the open ledger: damage found now is reported, and the next `claw run`
        checks every page (ledgerfile.suspect)."""
        try:
            return ledgerfile.checked(fn, self.path)
        except Corrupt as e:
            if not self.readonly:
                ledgerfile.suspect(self.path)
            raise ClawError(ledgerfile.unusable(self.path, e)) from None

    def _has_quick(self) -> bool:
        return self._has_column("done", "quick")

    def _has_column(self, table: str, column: str) -> bool:
        return any(row[1] == column for row in self._query(f"PRAGMA table_info({table})"))

    def _execute(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        """Jobs run in threads and share this connection: one statement at a time."""
        with self._lock:
            return self._checked(lambda: self.db.execute(sql, args))

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._checked(lambda: self.db.execute(sql, args).fetchall())

    def close(self) -> None:
        try:
            if self._ends and not self._writing:  # a batch that failed, tried once more
                with self._ends_lock:
                    self._writing = True
                self._write_ends()
            if self._calls:  # jobs that never reached finish_job: keep what they cost
                with self.transaction():
                    for calls in self._calls.values():
                        self.db.executemany(INSERT_CALL, calls)
                self._calls.clear()
        finally:
            self.db.close()

    def begin_run(self, run_id: str, started: str, argv: str) -> None:
        self._execute(
            "INSERT INTO runs (id, started, status, argv) VALUES (?, ?, 'running', ?)",
            (run_id, started, argv),
        )

    def end_run(self, run_id: str, finished: str, status: str, exit_code: int) -> None:
        self._execute(
            "UPDATE runs SET finished = ?, status = ?, exit_code = ? WHERE id = ?",
            (finished, status, exit_code, run_id),
        )

    def start_job(self, run_id: str, task: str, item: str, started: str) -> None:
        """Mark the job running and forget its last success (the `forget_done` trigger), in
        one statement and so one transaction: a job killed from here on is never taken for
        done. One statement where a transaction of four would hand the GIL to another job
        at each of them (-j 32)."""
        self._execute(
            "INSERT OR REPLACE INTO jobs (run_id, task, item, status, started) "
            "VALUES (?, ?, ?, 'running', ?)",
            (run_id, task, item, started),
        )

    def succeed_job(self, r: JobRecord, done: Done) -> None:
        """Record success with the output hashes (after the outputs are safely on disk): the
        job's row, its model calls and its `done` row in one transaction (see _end_job)."""
        self._end_job(r, done)

    def sealed(self) -> dict[tuple[str, str], str | None]:
        """Every job with a last success, and its quick seal (prepare.TaskKey): all that a
        no-op needs of the ledger, a tenth of its bytes."""
        quick = "quick" if self.has_quick else "NULL"
        rows = self._query(f"SELECT task, item, {quick} FROM done")
        return {(r[0], r[1]): r[2] for r in rows}

    def done(self, task: str, item: str) -> Done | None:
        """The job's last success in full."""
        quick = "quick" if self.has_quick else "NULL"
        tainted = "tainted" if self.has_taint else "NULL"
        rows = self._query(
            f"SELECT task, item, fingerprint, parts, outputs, result, {quick}, {tainted} "
            "FROM done WHERE task = ? AND item = ?",
            (task, item),
        )
        return Done(*rows[0]) if rows else None

    def set_quick(self, rows: list[tuple[str, str, str]]) -> None:
        """(quick, task, item): jobs the full check found up to date, for the next run."""
        if rows:
            with self.transaction():
                self.db.executemany("UPDATE done SET quick = ? WHERE task = ? AND item = ?", rows)

    def file_entries(self) -> dict[str, Entry]:
        ctime = "ctime_ns" if self.has_ctime else "NULL"
        rows = self._query(f"SELECT path, mtime_ns, size, inode, {ctime}, sha256 FROM files")
        return {loaded_path(r[0]): (r[1], r[2], r[3], r[4], r[5]) for r in rows}

    def save_file_entries(self, entries: dict[str, Entry]) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO files (path, mtime_ns, size, inode, ctime_ns, sha256) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(stored_path(path), *entry) for path, entry in entries.items()],
            )

    def select(self, sql: str, args: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        """A read of a table another module keeps (taintledger), on the shared connection."""
        return self._query(sql, args)

    def has_table(self, name: str) -> bool:
        """Whether the table exists: a read-only ledger of an older claw may lack one."""
        rows = self._query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return bool(rows)

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[None]:
        """The statements of the block in one transaction (the slot, verdict and watch ledgers
        use it too); a failure leaves nothing of it, and SQLite's errors are said for a user.
        `durable`: on disk when the block ends, even through a power cut (with WAL, a commit
        is otherwise synced at the next checkpoint) — for what must be known before a file
        is written (taintledger)."""
        with self._lock:
            if durable:
                self._checked(lambda: self.db.execute("PRAGMA synchronous=FULL"))
            self._checked(lambda: self.db.execute("BEGIN IMMEDIATE"))
            try:
                try:
                    yield
                except sqlite3.Error as e:  # a statement of the block (a full disk)
                    self._checked(functools.partial(_reraise, e))
                self._checked(lambda: self.db.execute("COMMIT"))
            except BaseException:
                if self.db.in_transaction:  # SQLite rolls back some failures itself
                    with contextlib.suppress(sqlite3.Error):
                        self.db.execute("ROLLBACK")
                raise
            finally:
                if durable:
                    with contextlib.suppress(sqlite3.Error):
                        self.db.execute("PRAGMA synchronous=NORMAL")

    def finish_job(self, r: JobRecord) -> None:
        """Record how the job ended, with its model calls, in one transaction."""
        self._end_job(r, None)

    def _end_job(self, r: JobRecord, done: Done | None) -> None:
        """Group commit: the thread that finds no other writing writes every job that ended
        meanwhile, in one transaction per batch, until none is left; a job that ends while
        another thread writes leaves its rows to it and goes on at once. At -j 32 a
        transaction of its own per job held the ledger for several GIL hand-overs each, and
        the jobs queued behind it. A process killed outright can lose the rows of jobs that
        ended in its last moments (their outputs are on disk; they run again); close()
        writes whatever is left."""
        with self._ends_lock:
            self._ends.append((r, done))
            if self._writing:
                return
            self._writing = True
        self._write_ends()

    def _write_ends(self) -> None:
        while True:
            with self._ends_lock:
                batch, self._ends = self._ends, []
                if not batch:
                    self._writing = False
                    return
            try:
                with self.transaction():
                    self._write_batch(batch)
            except BaseException:
                with self._ends_lock:
                    self._ends[:0] = batch  # for close(), or the next job, to try again
                    self._writing = False
                raise

    def _write_batch(self, batch: list[tuple[JobRecord, Done | None]]) -> None:
        self._insert(
            "INSERT INTO jobs",
            [_job_row(r) for r, _ in batch],
            " ON CONFLICT (run_id, task, item) DO UPDATE SET status=excluded.status, "
            "reason=excluded.reason, duration_s=excluded.duration_s, "
            "prompt_tokens=excluded.prompt_tokens, completion_tokens=excluded.completion_tokens, "
            "cached_tokens=excluded.cached_tokens, cost_usd=excluded.cost_usd, "
            "output=excluded.output, error=excluded.error, transcript=excluded.transcript",
        )
        calls = [c for r, _ in batch for c in self._calls.pop((r.run_id, r.task, r.item), ())]
        if calls:
            self._insert("INSERT INTO calls", calls)
        done_rows = [_done_row(r, done) for r, done in batch if done is not None]
        if done_rows:
            self._insert(
                "INSERT OR REPLACE INTO done "
                "(task, item, fingerprint, parts, outputs, result, run_id, quick, tainted)",
                done_rows,
            )

    def _insert(self, head: str, rows: list[tuple[object, ...]], tail: str = "") -> None:
        """`head VALUES (...), (...)tail`: the rows in one statement, or as few as SQLite's
        limit on parameters allows. executemany is a step per row, and sqlite3 lets go of
        the GIL at each: at -j 32 a batch of ends then waited for it dozens of times while
        holding the ledger, and the jobs starting meanwhile waited behind it."""
        width = len(rows[0])
        one = "(" + ", ".join("?" * width) + ")"
        per = max(1, MAX_PARAMS // width)
        for start in range(0, len(rows), per):
            chunk = rows[start : start + per]
            values = ", ".join([one] * len(chunk))
            self.db.execute(f"{head} VALUES {values}{tail}", [v for row in chunk for v in row])

    def record_call(
        self,
        run_id: str,
        task: str,
        item: str,
        step: int,
        model: str,
        usage: dict[str, int],
        seconds: float,
        cost_usd: float | None = None,
    ) -> None:
        """Keep a model call for the job's final transaction (finish_job, succeed_job, or
        close for a job left unfinished): a transaction per call would cost each model turn a
        write to the WAL and the system calls around it. A process killed outright (kill -9,
        a power cut) loses the call rows of the jobs it was running; Ctrl-C, SIGTERM and
        errors end every job through finish_job."""
        row = (
            run_id,
            task,
            item,
            step,
            model,
            usage.get("prompt", 0),
            usage.get("completion", 0),
            usage.get("cached", 0),
            seconds,
            cost_usd,
        )
        self._calls.setdefault((run_id, task, item), []).append(row)  # atomic under the GIL

    def spent_since(self, task: str | None, since: dt.datetime) -> float:
        """USD the ledger's jobs (of `task`, or all) that started since `since` cost."""
        where = "julianday(started) >= julianday(?)" + (" AND task = ?" if task else "")
        args: tuple[object, ...] = (since.isoformat(), task) if task else (since.isoformat(),)
        rows = self._query(f"SELECT COALESCE(SUM(cost_usd), 0) FROM jobs WHERE {where}", args)
        return float(rows[0][0])

    def last_run_id(self) -> str | None:
        """The run that started last (in this database's order: a pinned clock may lie)."""
        rows = self._query("SELECT id FROM runs ORDER BY rowid DESC LIMIT 1")
        return str(rows[0]["id"]) if rows else None


def _reraise(error: sqlite3.Error) -> None:
    raise error


def _job_row(r: JobRecord) -> tuple[object, ...]:
    """The jobs table's columns, in its order."""
    return (
        r.run_id,
        r.task,
        r.item,
        r.status,
        r.reason,
        r.started,
        r.duration_s,
        r.prompt_tokens,
        r.completion_tokens,
        r.cached_tokens,
        r.cost_usd,
        r.output,
        r.error,
        r.transcript,
    )


def _done_row(r: JobRecord, done: Done) -> tuple[object, ...]:
    return (
        done.task,
        done.item,
        done.fingerprint,
        done.parts_json,
        done.outputs_json,
        done.result,
        r.run_id,
        done.quick,
        done.tainted,
    )

"""The ledger's connection: opening `.claw/state.db` (read-only as it is, or created and
brought up to date, a corrupt one moved aside), one statement at a time for the jobs'
threads, and transactions whose failures are said for a user (see ledgerfile).

State (claw_batch.store.state) extends it; the other tables' modules (the file hashes, the
taint, verdict, slot and watch ledgers) work through the State a command opened.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from claw_batch.errors import ClawError
from claw_batch.store import ledgerfile, schema
from claw_batch.store.ledgerfile import Corrupt

T = TypeVar("T")

# Parameters in one statement: the limit of SQLite before 3.32 (later ones allow 32766).
MAX_PARAMS = 999


def read_only(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection that only reads the ledger. With no WAL left behind it is opened as
    immutable: SQLite then creates no -wal/-shm files, so a dry run, `claw log`, `show` or
    `report` leaves .claw/ byte for byte as it was; with one (a run is writing), read-only."""
    wal = path.with_name(path.name + "-wal").exists()
    mode = "mode=ro" if wal else "immutable=1"
    return sqlite3.connect(f"file:{path}?{mode}", uri=True, check_same_thread=check_same_thread)


class Database:
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
        self.db = read_only(path, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        ledgerfile.checked(lambda: ledgerfile.verify(self.db, pages=()), path)
        # Read-only: an old state.db stays old, and its readers ask what it has.
        self.has_quick = self._has_column("done", "quick")
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
        self.db.executescript(schema.SCHEMA)
        for table, column, kind in schema.ADDED:  # a state.db from before the column
            if not self._has_column(table, column):
                self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        self.db.executescript(schema.INDEXES)
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

    def _has_column(self, table: str, column: str) -> bool:
        return any(row[1] == column for row in self._query(f"PRAGMA table_info({table})"))

    def _execute(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        """Jobs run in threads and share this connection: one statement at a time."""
        with self._lock:
            return self._checked(lambda: self.db.execute(sql, args))

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._checked(lambda: self.db.execute(sql, args).fetchall())

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

    def close(self) -> None:
        self.db.close()
        if not self.readonly:  # checked as it opened: the next opening may skip that
            ledgerfile.closed(self.path)

    def select(self, sql: str, args: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        """A read of another module's table (the taint ledger's), on the shared connection."""
        return self._query(sql, args)

    def each(
        self, sql: str, args: tuple[object, ...], row: Callable[[tuple[Any, ...]], None]
    ) -> None:
        """`row` called with each row of `sql` as it is read, none kept: a read over a task's
        100,000 jobs that holds one at a time."""

        def read() -> None:
            cursor = self.db.cursor()
            cursor.row_factory = None
            for found in cursor.execute(sql, args):
                row(found)

        with self._lock:
            self._checked(read)

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
        is written (the taint ledger)."""
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


def _reraise(error: sqlite3.Error) -> None:
    raise error

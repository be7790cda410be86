"""The call cache's store (`.claw/cache/`): the replies of earlier runs in `calls.db` (SQLite),
this run's appended to its journal as they arrive, and what `claw cache` shows and trims
(`stats`, `prune`, `clear`). What is kept, under which key, and when it answers is
llm.callcache's.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MAX_SIZE = 2 << 30  # bytes of replies kept: 2 GiB
FOLD_EVERY = 4096  # replies in the journal before it goes into calls.db (and is emptied)

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,          -- sha256 of the canonical request (KEY_VERSION)
    reply TEXT NOT NULL,           -- the completion as JSON, redacted
    created REAL NOT NULL,         -- unix time
    last_used REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0  -- prompt + completion: what each hit saved
);
"""


def cache_dir(root: Path) -> Path:
    return root / ".claw" / "cache"


class CallStore:
    """`.claw/cache/`: the replies of earlier runs in `calls.db`, and this run's appended to
    a journal (`journal-<pid>.jsonl`) as they arrive — one write each, in the OS's hands
    before the job uses the reply, which a `kill -9` cannot take back; an SQLite commit a
    reply cost a turn ~15 times as much. The journal goes into `calls.db` every FOLD_EVERY
    replies and when the run ends, or, when it was killed, when the next run opens the
    cache. Hits are counted in memory and written at the end. Opened when first used; an
    error turns it off for the rest of the run, with one warning: calls are made live, no
    job fails for it."""

    def __init__(self, directory: Path, *, warn: Callable[[str], None] = lambda _: None) -> None:
        self.directory = directory
        self.path = directory / "calls.db"
        self.warn = warn
        self._db: sqlite3.Connection | None = None
        self._off = False
        self._lock = threading.Lock()
        self._journal: int | None = None  # the file descriptor
        self._journal_path = directory / f"journal-{os.getpid()}.jsonl"
        self._written = 0  # bytes of the journal
        self._fresh: dict[str, tuple[int, int]] = {}  # in the journal: key -> (offset, length)
        self._hits: dict[str, int] = {}
        self.fold_every = FOLD_EVERY

    def _connect(self) -> sqlite3.Connection | None:
        """Called under the lock."""
        if self._db is None and not self._off:
            try:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._db = _connect(self.path)
                for left in sorted(self.directory.glob("journal-*.jsonl")):
                    _absorb(self._db, left)  # a killed run's
                    left.unlink()
            except (sqlite3.Error, OSError, ValueError) as e:
                self._failed(e)
        return self._db

    def _failed(self, error: Exception) -> None:
        self._off = True
        if self._db is not None:
            self._db.close()
            self._db = None
        self.warn(
            f"claw: warning: the call cache {self.path} cannot be used ({error}): model "
            "calls are made live; `claw cache clear` starts a new one"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            db = self._connect()
            if db is None:
                return None
            try:
                text = self._fresh_text(key)
                if text is None:
                    row = db.execute("SELECT reply FROM calls WHERE key = ?", (key,)).fetchone()
                    if row is None:
                        return None
                    text = row[0]
            except (sqlite3.Error, OSError, ValueError) as e:
                self._failed(e)
                return None
            try:
                reply: dict[str, Any] = json.loads(text)
            except (ValueError, RecursionError):
                self._forget(db, key)  # one unreadable entry: a miss, and asked anew
                return None
            self._hits[key] = self._hits.get(key, 0) + 1
            return reply

    def _forget(self, db: sqlite3.Connection, key: str) -> None:
        """An entry that cannot be read out of the cache (under the lock)."""
        self._fresh.pop(key, None)
        try:
            db.execute("DELETE FROM calls WHERE key = ?", (key,))
        except sqlite3.Error as e:
            self._failed(e)

    def _fresh_text(self, key: str) -> str | None:
        """A reply this run stored (read back from its journal)."""
        where = self._fresh.get(key)
        if where is None or self._journal is None:
            return None
        line = os.pread(self._journal, where[1], where[0])
        return line.decode().rstrip("\n").split("\t", 3)[3]

    def put(self, key: str, reply: dict[str, Any], tokens: int) -> None:
        try:
            text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
            # JSON escapes every line break and tab in a string: the text ends the line
            # alone. A lone surrogate (half an emoji a server cut) can only be inside a
            # string: written as JSON's escape for it, `\ud83d`, it reads back the same.
            line = f"{key}\t{tokens}\t{time.time()!r}\t{text}\n".encode(errors="backslashreplace")
        except (ValueError, TypeError, RecursionError) as e:
            self.warn(f"claw: warning: a reply was not kept in the call cache: {e}")
            return
        with self._lock:
            if self._connect() is None:
                return
            try:
                if self._journal is None:
                    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
                    self._journal = os.open(self._journal_path, flags, 0o600)
                    self._written = os.fstat(self._journal).st_size
                view = memoryview(line)
                while view:  # a short write goes on where it stopped
                    view = view[os.write(self._journal, view) :]
                self._fresh[key] = (self._written, len(line))
                self._written += len(line)
                if len(self._fresh) >= self.fold_every:
                    self._fold()
            except (OSError, sqlite3.Error) as e:
                self._failed(e)

    def _fold(self) -> None:
        """The journal into calls.db, then emptied: a run of 100,000 jobs keeps neither a
        journal nor an index of it that grows with it. Under the lock. Killed between the
        two, the next run takes the same lines again (an upsert)."""
        assert self._db is not None and self._journal is not None
        _absorb(self._db, self._journal_path)
        os.ftruncate(self._journal, 0)
        self._written = 0
        self._fresh.clear()

    def close(self) -> None:
        """This run's journal into calls.db, and its hits counted."""
        with self._lock:
            db, journal = self._db, self._journal
            self._db, self._journal = None, None
            if journal is not None:
                os.close(journal)
            if db is None:
                return
            try:
                if journal is not None:
                    _absorb(db, self._journal_path)
                    self._journal_path.unlink()
                if self._hits:
                    now = time.time()
                    db.execute("BEGIN IMMEDIATE")
                    db.executemany(
                        "UPDATE calls SET hits = hits + ?, last_used = ? WHERE key = ?",
                        [(n, now, key) for key, n in self._hits.items()],
                    )
                    db.execute("COMMIT")
            except (sqlite3.Error, OSError) as e:
                self.warn(f"claw: warning: the call cache {self.path} was not updated: {e}")
            finally:
                db.close()
                self._fresh.clear()
                self._hits.clear()


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 5000")
    db.execute("PRAGMA journal_mode = WAL")
    db.executescript(SCHEMA)
    return db


def _absorb(db: sqlite3.Connection, journal: Path) -> None:
    """A journal's entries into calls.db, in one transaction; a line a kill cut is left out."""
    rows = []
    with journal.open("rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                continue  # a write a kill cut
            try:
                key, tokens, when, text = line.decode().rstrip("\n").split("\t", 3)
                rows.append((key, text, float(when), float(when), len(line), int(tokens)))
            except ValueError:
                continue
    if not rows:
        return
    db.execute("BEGIN IMMEDIATE")
    db.executemany(  # an entry stored again (by -B's twin, or a journal taken twice) keeps its hits
        "INSERT INTO calls (key, reply, created, last_used, hits, bytes, tokens) "
        "VALUES (?, ?, ?, ?, 0, ?, ?) ON CONFLICT (key) DO UPDATE SET reply = excluded.reply, "
        "last_used = excluded.last_used, bytes = excluded.bytes, tokens = excluded.tokens",
        rows,
    )
    db.execute("COMMIT")


@dataclass(frozen=True)
class Stats:
    entries: int
    bytes: int  # of replies
    file_bytes: int  # of the database's files
    oldest: float | None  # unix time of the oldest entry made
    newest: float | None
    hits: int
    saved_tokens: int  # the tokens the hits did not pay for


def _files(directory: Path) -> Iterator[Path]:
    for name in ("calls.db", "calls.db-wal", "calls.db-shm"):
        path = directory / name
        if path.exists():
            yield path
    yield from sorted(directory.glob("journal-*.jsonl"))


def _open(directory: Path, *, absorb: bool = False) -> sqlite3.Connection | None:
    """calls.db; `absorb` (under the project lock): with the journals killed runs left."""
    path = directory / "calls.db"
    journals = sorted(directory.glob("journal-*.jsonl")) if absorb else []
    if not path.exists() and not journals:
        return None
    db = _connect(path)
    for journal in journals:
        _absorb(db, journal)
        journal.unlink()
    return db


def stats(directory: Path) -> Stats:
    db = _open(directory)
    size = sum(p.stat().st_size for p in _files(directory))
    if db is None:
        return Stats(0, 0, size, None, None, 0, 0)
    try:
        row = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0), MIN(created), MAX(created), "
            "COALESCE(SUM(hits), 0), COALESCE(SUM(hits * tokens), 0) FROM calls"
        ).fetchone()
    finally:
        db.close()
    return Stats(row[0], row[1], size, row[2], row[3], row[4], row[5])


def prune(directory: Path, *, older_than: float | None = None, max_size: int | None = None) -> int:
    """Remove the entries not used for `older_than` seconds, then the ones used longest ago
    until the replies take at most `max_size` bytes; how many went. Under the project lock."""
    db = _open(directory, absorb=True)
    if db is None:
        return 0
    removed = 0
    try:
        db.execute("BEGIN IMMEDIATE")
        if older_than is not None:
            cut = time.time() - older_than
            removed += db.execute("DELETE FROM calls WHERE last_used < ?", (cut,)).rowcount
        if max_size is not None:
            total = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM calls").fetchone()[0]
            if total > max_size:
                doomed: list[tuple[str]] = []
                for key, size in db.execute("SELECT key, bytes FROM calls ORDER BY last_used"):
                    if total <= max_size:
                        break
                    doomed.append((key,))
                    total -= size
                db.executemany("DELETE FROM calls WHERE key = ?", doomed)
                removed += len(doomed)
        db.execute("COMMIT")
        if removed:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if _mostly_free(db):  # not every run's end: VACUUM rewrites the whole file
                db.execute("VACUUM")
    finally:
        db.close()
    return removed


VACUUM_FREE = 0.25  # prune gives the space back when this share of calls.db is free pages


def _mostly_free(db: sqlite3.Connection) -> bool:
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    return bool(pages) and free > pages * VACUUM_FREE


def clear(directory: Path) -> int:
    """Remove every entry (the files too); how many there were."""
    entries = 0
    with contextlib.suppress(sqlite3.Error):  # unreadable: removed all the same
        entries = stats(directory).entries
    for path in list(_files(directory)):
        path.unlink()
    return entries

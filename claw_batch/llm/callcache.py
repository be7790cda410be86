"""The call cache: every complete model reply kept in `.claw/cache/calls.db` by the sha256 of
its request, so that a job that runs again — after `kill -9`, Ctrl-C, a timeout, a budget
stop, a failure — replays the turns whose requests are the same at no cost, then goes on live.

The key is the request as a canonical form, redacted as cassettes are (llm.cassette):
the endpoint (its base URL without credentials or query), the model, the messages — the
first ones as `request.key_messages` read, with placeholders for the daily notes, the time
and the project's location, which change between runs without changing the question — the
day (a task asked again on another day is a new request), the tools, the temperature and the
sample index (`-B` asks for the next one: nothing is replayed). Never a key, a header, a
timeout or a retry setting.

A job's requests only grow: each adds the last reply and the tool results to the one before.
The key is kept as a running hash per job, so a turn hashes its new messages only, never the
whole conversation again (issue 17: a turn's CPU must not grow with the conversation).

Only a complete answer is kept: not an error, a reply cut at max_tokens, a refusal, or an
empty one. Identical requests in flight at once are made once: the others wait for the first
and take its reply from the cache. The store is bounded (`cache: {max_size: ...}`): the
entries used longest ago go first, at the end of a run. A cache that cannot be read is a
warning and live calls, never a failed job.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from claw_batch import baton, cancel
from claw_batch.llm.base import LLM
from claw_batch.llm.messages import ChatRequest, Completion, Message, ToolSpec
from claw_batch.llm.replyjson import completion_from_json, completion_json, message_json, redacted

KEY_VERSION = 1  # a new canonical form: a new number, and the old entries are never found
DEFAULT_MAX_SIZE = 2 << 30  # bytes of replies kept: 2 GiB
NOT_KEPT = frozenset({"length", "content_filter", "refusal"})  # finish reasons
MAX_CHAINS = 10_000  # running hashes kept (one per job in flight): past it, they start again

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
CREATE INDEX IF NOT EXISTS calls_last_used ON calls (last_used);
"""


def cache_dir(root: Path) -> Path:
    return root / ".claw" / "cache"


def endpoint_identity(base_url: str | None) -> str:
    """The endpoint as the key names it: scheme, host, port and path, never credentials
    (`https://user:key@host`) nor a query (`?api-key=...`)."""
    if not base_url:
        return "openai:default"
    parts = urlsplit(base_url.strip())
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return "openai:" + urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def cacheable(completion: Completion) -> bool:
    """A complete answer: not cut, not refused, not empty."""
    if completion.finish_reason in NOT_KEPT:
        return False
    message = completion.message
    return bool(message.tool_calls or (message.content or "").strip())


class CallStore:
    """`.claw/cache/calls.db`: one connection, one statement at a time. Opened when first
    used; any SQLite error turns it off for the rest of the run, with one warning."""

    def __init__(self, directory: Path, *, warn: Callable[[str], None] = lambda _: None) -> None:
        self.directory = directory
        self.path = directory / "calls.db"
        self.warn = warn
        self._db: sqlite3.Connection | None = None
        self._off = False
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection | None:
        """Called under the lock."""
        if self._db is None and not self._off:
            try:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA busy_timeout = 5000")
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")  # a commit survives kill -9
                db.executescript(SCHEMA)
                self._db = db
            except (sqlite3.Error, OSError) as e:
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
                row = db.execute("SELECT reply FROM calls WHERE key = ?", (key,)).fetchone()
                if row is None:
                    return None
                db.execute(
                    "UPDATE calls SET hits = hits + 1, last_used = ? WHERE key = ?",
                    (time.time(), key),
                )
                reply: dict[str, Any] = json.loads(row[0])
                return reply
            except (sqlite3.Error, ValueError) as e:
                self._failed(e)
                return None

    def put(self, key: str, reply: dict[str, Any], tokens: int) -> None:
        text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
        now = time.time()
        with self._lock:
            db = self._connect()
            if db is None:
                return
            try:  # autocommit: on disk (in the WAL) before the tool loop reads the reply
                db.execute(
                    "INSERT OR REPLACE INTO calls (key, reply, created, last_used, hits, bytes, "
                    "tokens) VALUES (?, ?, ?, ?, 0, ?, ?)",
                    (key, text, now, now, len(text.encode()), tokens),
                )
            except sqlite3.Error as e:
                self._failed(e)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


@dataclass
class _Chain:
    """A job's messages hashed so far: the hash, how many, and the last one (the same
    object, or the job's messages are not the ones hashed)."""

    hasher: Any  # hashlib's sha256 object
    count: int
    last: Message | None
    keys: tuple[Message, ...]


class CachedLLM:
    """Answers from the cache what it holds; asks `inner` the rest, and keeps the answer."""

    def __init__(
        self,
        inner: LLM,
        store: CallStore,
        *,
        endpoint: str,
        day: str,
        redact: Callable[[str], str],
    ) -> None:
        self.inner = inner
        self.store = store
        self.endpoint = endpoint
        self.day = day  # the run's date: a request of another day is another request
        self.redact = redact
        self._chains: dict[str, _Chain] = {}  # by job
        self._tools: tuple[tuple[ToolSpec, ...], str] | None = None  # the specs and their JSON
        self._inflight: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        key = self.key(request)
        while True:
            found = self._replayed(key)
            if found is not None:
                return found
            with self._lock:
                waiter = self._inflight.get(key)
                if waiter is None:
                    mine = self._inflight[key] = threading.Event()
            if waiter is None:
                break
            _wait(waiter, deadline)  # the same request in flight: its reply, when it comes
        try:
            completion = self.inner.complete(request, deadline=deadline)
            if cacheable(completion):
                stored = redacted(completion_json(completion), self.redact)
                self.store.put(key, stored, completion.usage.total_tokens)
            return completion
        finally:
            with self._lock:
                del self._inflight[key]
            mine.set()

    def _replayed(self, key: str) -> Completion | None:
        data = self.store.get(key)
        if data is None:
            return None
        try:
            completion = completion_from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None  # an entry this claw cannot read: asked again, and stored anew
        return Completion(
            completion.message,
            completion.usage,
            completion.finish_reason,
            completion.model,
            replayed=True,
        )

    def key(self, request: ChatRequest) -> str:
        """The request's key: the job's messages hashed once each, then the rest."""
        hasher = self._chain(request).hasher.copy()
        tail = {
            "v": KEY_VERSION,
            "endpoint": self.endpoint,
            "model": request.model,
            "day": self.day,
            # 0 from YAML and 0.0 from elsewhere are the same setting.
            "temperature": None if request.temperature is None else float(request.temperature),
            "sample": request.sample,
        }
        hasher.update(b"\x00" + self._tools_json(request.tools))
        hasher.update(b"\x00" + _compact(redacted(tail, self.redact)))
        return str(hasher.hexdigest())

    def _chain(self, request: ChatRequest) -> _Chain:
        messages, keys = request.messages, request.key_messages
        chain = self._chains.get(request.job)
        if (
            chain is None
            or chain.keys is not keys
            or chain.count > len(messages)
            or (chain.count and messages[chain.count - 1] is not chain.last)
        ):
            if len(self._chains) >= MAX_CHAINS:
                self._chains.clear()
            chain = _Chain(hashlib.sha256(), 0, None, keys)
            self._chains[request.job] = chain
        for i in range(chain.count, len(messages)):
            shown = keys[i] if i < len(keys) else messages[i]
            chain.hasher.update(_compact(redacted(message_json(shown), self.redact)) + b"\n")
        if len(messages) > chain.count:
            chain.count, chain.last = len(messages), messages[-1]
        return chain

    def _tools_json(self, tools: tuple[ToolSpec, ...]) -> bytes:
        known = self._tools
        if known is not None and known[0] is tools:
            return known[1].encode()
        text = _compact(
            redacted(
                [
                    {
                        "name": t.name,
                        "description": t.description,
                        "parameters": _plain(t.parameters),
                    }
                    for t in tools
                ],
                self.redact,
            )
        ).decode()
        self._tools = (tools, text)
        return text.encode()


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _compact(value: Any) -> bytes:
    # ensure_ascii: a newline in a string is written `\n`, so b"\n" ends a message alone.
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _wait(event: threading.Event, deadline: float) -> None:
    """Until `event` is set, the deadline passes (the caller then asks itself) or the run is
    cancelled."""
    with baton.released():
        while not event.wait(cancel.POLL):
            cancel.check()
            if time.monotonic() >= deadline:
                return


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


def _open(directory: Path) -> sqlite3.Connection | None:
    path = directory / "calls.db"
    if not path.exists():
        return None
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 5000")
    db.executescript(SCHEMA)
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
    until the replies take at most `max_size` bytes; how many went."""
    db = _open(directory)
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
            db.execute("VACUUM")
    finally:
        db.close()
    return removed


def clear(directory: Path) -> int:
    """Remove every entry (the files too); how many there were."""
    entries = 0
    with contextlib.suppress(sqlite3.Error):  # unreadable: removed all the same
        entries = stats(directory).entries
    for path in list(_files(directory)):
        path.unlink()
    return entries

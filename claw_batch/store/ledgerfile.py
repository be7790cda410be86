"""The ledger's file, `.claw/state.db`: whether it is a claw ledger, what SQLite's errors
mean to a user, and moving a corrupt one aside.

Corrupt: garbage, a truncated file, tables without the columns every version of the ledger
had (another program's) — SQLite and `verify` see these at once — or a damaged page. A run
has SQLite check the pages of what it reads whole (the `done` and `files` tables: ~10 ms for
10,000 jobs, ~0.12 s for 100,000, however long the history in `runs`, `jobs` and `calls`);
damage found anywhere later marks the ledger suspect, and the next run checks every page. A
`claw run` moves a corrupt ledger aside as `state.db.corrupt-<time>`, as it was found, and
starts a new one: every job runs again. A write SQLite cannot make (a full disk) is `ledger
.claw/state.db: No space left on device`.

The page check is not paid again for a ledger nothing has written since a connection that
checked it closed it cleanly (`closed`): that close leaves `state.db.checked`, the ledger's
stat keys (device, inode, size, mtime, ctime) as it left it, and no WAL (SQLite deletes it
when its last connection closes; a run killed or cut off by a power loss leaves it). An
opening trusts it only when the ledger's stat keys are those, no WAL is there and the stamp
was written in a later clock tick than the ledger's last change (a write in the same tick
would leave the keys as they were): any other write — another program's, a copy put in its
place, one that put the mtime back — moves the ctime at least, and the pages are checked.
Between a check and that close, only the connection's own SQLite writes the file (the run
holds the project lock; no sandboxed job may write .claw/). A command run unsandboxed
(`sandbox: none`) could: a process in which one ran beside a `.claw/` stamps nothing there.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from claw_batch.errors import ClawError

T = TypeVar("T")

# The columns every version of the ledger had (later ones were added by migrations).
COLUMNS = {
    "runs": {"id", "started", "finished", "status", "exit_code", "argv"},
    "jobs": {"run_id", "task", "item", "status", "reason", "started", "duration_s", "output"},
    "done": {"task", "item", "fingerprint", "parts", "outputs", "result", "run_id"},
    "files": {"path", "mtime_ns", "size", "inode", "sha256"},
    "calls": {"run_id", "task", "item", "step", "model", "prompt_tokens", "completion_tokens"},
}
BULK = ("done", "files")  # the tables a run reads whole
# `PRAGMA quick_check(TABLE)` checks one table (and its indexes) since SQLite 3.33.
BY_TABLE = sqlite3.sqlite_version_info >= (3, 33, 0)
# SQLite's primary result codes (sqlite3.Error.sqlite_errorcode, Python 3.11+).
SQLITE_BUSY, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = 5, 10, 11, 13, 26
STAMP = "claw-ledger-checked-1"  # the first word of state.db.checked
# Ledgers this process found damage in since it opened them: never stamped as checked.
_damaged: set[Path] = set()
# The `.claw/` folders (real paths) beside which this process ran a command unsandboxed.
_unguarded: set[str] = set()


class Corrupt(Exception):
    """The file is not a claw ledger; the message says how."""


def shown(path: Path) -> str:
    """`.claw/state.db`, for messages."""
    return f"{path.parent.name}/{path.name}"


def pages_to_check(path: Path) -> tuple[str, ...] | None:
    """The tables whose pages a run checks: those it reads whole, every one (`()`) when the
    ledger is suspect, none (None) when it has not changed since it was checked and closed
    cleanly. Asked before the connection's first read (which makes the WAL)."""
    if _suspect_mark(path).exists() or not BY_TABLE:
        return ()
    if _unchanged_since_checked(path):
        return None
    return BULK


def suspect(path: Path) -> None:
    """Damage was found in the open ledger: the next run checks every page of it."""
    _damaged.add(path)
    with contextlib.suppress(OSError):
        _checked_mark(path).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        _suspect_mark(path).touch()


def unguarded(folder: Path) -> None:
    """A command runs outside the sandbox in the project of `folder` (its `.claw/`): it may
    write the ledgers there, so none of them is stamped when this process closes it."""
    _unguarded.add(os.path.realpath(folder))


def closed(path: Path) -> None:
    """A connection that checked the ledger as it opened it (or found it unchanged since a
    check) closed it and found no damage: stamp it, for the next opening (module docstring).
    Nothing when SQLite left a WAL (another connection is open) or the stamp cannot be
    written: the next opening checks the pages."""
    mark = _checked_mark(path)
    if os.path.realpath(path.parent) in _unguarded:
        with contextlib.suppress(OSError):
            mark.unlink(missing_ok=True)
        return
    if path in _damaged or _suspect_mark(path).exists() or _wal(path).exists():
        return
    try:
        line = _stamp(os.stat(path))
        fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            written = os.write(fd, line)
            changed = os.stat(path).st_ctime_ns
            # The stamp must be from a later clock tick than the ledger's last change. A
            # file system's timestamps come from a clock that ticks every few ms; Linux
            # (6.13+) gives a fine-grained one to a change of a file whose times were read.
            for _ in range(3):
                if os.fstat(fd).st_mtime_ns > changed:
                    break
                os.utime(fd)
        finally:
            os.close(fd)
        if written != len(line) or _stamp(os.stat(path)) != line:  # it changed meanwhile
            mark.unlink()
    except OSError:
        with contextlib.suppress(OSError):
            mark.unlink(missing_ok=True)


def unusable(path: Path, problem: Corrupt) -> str:
    return (
        f"ledger {shown(path)} is corrupt ({problem}); the next `claw run` moves it aside and "
        "runs every job again"
    )


def verify(db: sqlite3.Connection, *, pages: tuple[str, ...] | None) -> None:
    """Raise Corrupt unless `db` is a claw ledger (or an empty file, a new one); `pages`: the
    tables whose every page SQLite checks, `()` for all of them, None for none."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    checks = ["1"] if pages == () else [t for t in pages or () if t in tables]
    for check in checks:  # a number: errors reported at most; a name: that table only
        problem = str(db.execute(f"PRAGMA quick_check({check})").fetchone()[0])
        if problem != "ok":  # "*** in database main ***\nPage 6: btreeInitPage() ..."
            lines = [line for line in problem.splitlines() if not line.startswith("***")]
            raise Corrupt(f"quick check: {' '.join(lines)}")
    for table, columns in COLUMNS.items():
        found = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if found and not columns <= found:
            missing = ", ".join(sorted(columns - found))
            raise Corrupt(f"its table {table} has no column {missing}")


def checked(fn: Callable[[], T], path: Path) -> T:
    """`fn`, with SQLite's errors said for a user: a corrupt file raises Corrupt; a write that
    cannot be made (a full disk) or a lock another process keeps, ClawError."""
    try:
        return fn()
    except sqlite3.DatabaseError as e:
        code = _code(e)
        if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
            raise Corrupt(str(e)) from None
        if code == SQLITE_FULL:
            raise ClawError(f"ledger {shown(path)}: No space left on device") from None
        if code == SQLITE_IOERR:  # e.g. no room for its shared-memory file
            full = " (No space left on device)" if _no_space(path) else ""
            raise ClawError(f"ledger {shown(path)}: {e}{full}") from None
        if code == SQLITE_BUSY:
            raise ClawError(f"ledger {shown(path)}: {e}: another process keeps it") from None
        raise


def move_aside(path: Path) -> Path:
    """Rename the ledger, and its WAL (which holds part of it), out of the way; SQLite's
    shared-memory index is rebuilt from them, so it goes."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.replace(path, aside)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path.with_name(path.name + "-wal"), aside.with_name(aside.name + "-wal"))
    gone = (path.with_name(path.name + "-shm"), _suspect_mark(path), _checked_mark(path))
    for file in gone:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(file)
    _damaged.discard(path)
    return aside


def _suspect_mark(path: Path) -> Path:
    return path.with_name(path.name + ".suspect")


def _checked_mark(path: Path) -> Path:
    return path.with_name(path.name + ".checked")


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _stamp(st: os.stat_result) -> bytes:
    """What `state.db.checked` holds for a ledger with these stat keys."""
    keys = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return f"{STAMP} {' '.join(map(str, keys))}\n".encode()


def _unchanged_since_checked(path: Path) -> bool:
    """Whether the ledger is as a connection that had checked it left it (`closed`)."""
    try:
        fd = os.open(_checked_mark(path), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        stamped, line = os.fstat(fd), os.read(fd, 256)
        st = os.stat(path)
    except OSError:
        return False
    finally:
        os.close(fd)
    if _wal(path).exists():
        return False
    return line == _stamp(st) and stamped.st_mtime_ns > st.st_ctime_ns


def _code(error: sqlite3.Error) -> int | None:
    """The primary result code; from the message before Python 3.11."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF
    text = str(error)
    for fragment, known in (
        ("file is not a database", SQLITE_NOTADB),
        ("malformed", SQLITE_CORRUPT),
        ("disk is full", SQLITE_FULL),
        ("disk I/O error", SQLITE_IOERR),
        ("database is locked", SQLITE_BUSY),
    ):
        if fragment in text:
            return known
    return None


def _no_space(path: Path) -> bool:
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except OSError:
        return False

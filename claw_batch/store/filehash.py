"""Content hashes of project files with a stat shortcut, kept in the ledger's `files` table:
a file is re-read only when its mtime, size, inode or ctime changed, so touching a file
without changing it reruns nothing.

The ctime is in the key because these hashes decide taint (claw_batch.taint.ledger compares
a file's hash with the one a tainted job left): a command can rewrite a file in place with
as many bytes and set its mtime back (utimensat), and a stale hash would then be trusted; it
cannot set the ctime, which the kernel stamps on every change. The quick up-to-date check
(`stamp`) keeps make's (mtime, size, inode): it decides only whether a job runs again (a
job left as it was keeps the result it made from what it read then), never what is
outside content."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterable
from pathlib import Path

from claw_batch.errors import ClawError
from claw_batch.store.schema import loaded_path, stored_path
from claw_batch.store.state import State

CHUNK = 1 << 20
BATCH = 1024  # file entries a run learns before it writes them to the ledger
# A file at least this large, hashed by this run and written to the ledger since, is looked
# up there rather than read again; a smaller one is read again, which costs as much.
ASK_LEDGER = 1 << 16
Entry = tuple[int, int, int, int | None, str]  # mtime_ns, size, inode, ctime_ns, sha256


def sha256_file(path: Path | str, size: int | None = None) -> str:
    """The file's sha256; `size`: its size by a stat just made, when known.

    Read through the file descriptor (no buffered file object: its fstat, ioctl and lseek are
    system calls, each of which hands the GIL to another job at -j 32), asking for one byte
    more than the stat said: a short read that brings the total to that size is the end of the
    file, so a small file takes open, one read and close.
    """
    digest = hashlib.sha256()
    expected = -1 if size is None else size  # -1: read until an empty read
    want = CHUNK if size is None else min(size + 1, CHUNK)
    total = 0
    # O_NONBLOCK: a FIFO swapped in after the caller's stat reads as empty instead of
    # waiting forever for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        while True:
            chunk = os.read(fd, want)
            digest.update(chunk)
            total += len(chunk)
            if not chunk or (len(chunk) < want and total >= expected >= 0):
                return digest.hexdigest()
            want = CHUNK
    finally:
        os.close(fd)


SPECIAL = "not a regular file"  # what a FIFO, socket or device path hashes to


class FileHashes:
    """Backed by the `files` table of state.db: loaded when first needed (a run whose jobs
    all pass the quick check never needs it). What a run learns is written back in batches
    as it goes, not kept: a run of 100,000 jobs would hold its 200,000 files' entries to the
    end. An entry written is read back from the ledger when asked again (ASK_LEDGER)."""

    def __init__(self, state: State | None, root: Path, *, batch: int = BATCH) -> None:
        self.root = root
        self._base = str(root)
        self._state = state  # None: nothing known, nothing saved (a new project)
        self._batch = batch  # entries learned before they are written (a dry run: never)
        self._lock = threading.Lock()
        self._writer = threading.Lock()  # held while entries are written
        self._loaded: dict[str, Entry] | None = None  # the table as it was, less what is learned
        self._changed: dict[str, Entry] = {}  # learned, not yet written
        self._writing: dict[str, Entry] = {}  # learned, being written

    @property
    def _known(self) -> dict[str, Entry]:
        with self._lock:
            if self._loaded is None:
                self._loaded = entries(self._state) if self._state else {}
            return self._loaded

    def _entry(self, rel: str) -> Entry | None:
        """What this process knows of the file: learned and not yet written, or loaded."""
        known = self._known
        return self._changed.get(rel) or self._writing.get(rel) or known.get(rel)

    def hash(self, rel: str) -> str | None:
        """The sha256 of a project-relative file, or None when it does not exist."""
        path = self._base + "/" + rel
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return SPECIAL  # a FIFO, socket or device is never opened: it could block forever
        key = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        known = self._entry(rel)
        if known is None and st.st_size >= ASK_LEDGER:
            known = self._written(rel)
        if known is not None and known[:4] == key:
            return known[4]
        return self._learn(rel, key, sha256_file(path, st.st_size))

    def hash_written(self, rel: str, data: bytes) -> str | None:
        """`hash` of a file this process has just written with `data`: hashed from those
        bytes rather than read back, its stat key taken now. A file whose size is no longer
        that of `data` (replaced meanwhile) is read after all."""
        try:
            st = os.stat(self._base + "/" + rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if st.st_size != len(data):
            return self.hash(rel)
        key = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        return self._learn(rel, key, hashlib.sha256(data).hexdigest())

    def _learn(self, rel: str, key: tuple[int, int, int, int], digest: str) -> str:
        known = self._known
        with self._lock:
            known.pop(rel, None)  # never again in the way of what is learned now
            self._changed[rel] = (*key, digest)
            full = len(self._changed) >= self._batch
        if full and self._state is not None and not self._state.readonly:
            self._write(wait=False)
        return digest

    def stamp(self, paths: Iterable[str]) -> str | None:
        """The files' stat keys (mtime, size, inode) now; None when one is missing."""
        keys = []
        base = self._base + "/"
        for rel in paths:
            try:
                st = os.stat(base + rel)
            except (FileNotFoundError, NotADirectoryError):
                return None
            keys.append(f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}")
        return ";".join(keys)

    def stamp_pair(self, first: str, second: str) -> str | None:
        """`stamp([first, second])`, in one step: a fan-out job's item and its one output,
        100,000 times in a no-op."""
        base = self._base + "/"
        try:
            a, b = os.stat(base + first), os.stat(base + second)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return f"{a.st_mtime_ns}:{a.st_size}:{a.st_ino};{b.st_mtime_ns}:{b.st_size}:{b.st_ino}"

    def hashed_stamp(self, paths: Iterable[str]) -> str | None:
        """The stat keys the files had when they were hashed; None when one never was."""
        keys = []
        for rel in paths:
            entry = self._entry(rel) or self._written(rel)
            if entry is None:
                return None
            keys.append(f"{entry[0]}:{entry[1]}:{entry[2]}")
        return ";".join(keys)

    def _written(self, rel: str) -> Entry | None:
        """A file's entry as the ledger has it: learned by this run and written since."""
        if self._state is None or self._state.readonly:
            return None
        ctime = "ctime_ns" if self._state.has_ctime else "NULL"
        rows = self._state.select(
            f"SELECT mtime_ns, size, inode, {ctime}, sha256 FROM files WHERE path = ?",
            (stored_path(rel),),
        )
        return tuple(rows[0]) if rows else None

    def save(self) -> None:
        """What is learned and not yet written, written."""
        self._write(wait=True)

    def _write(self, *, wait: bool) -> None:
        """The learned entries into the ledger. A batch written while jobs run gives way to
        one being written by another thread, and a failure (a full disk) leaves its entries
        for the next batch, or for `save`, whose failure the run reports."""
        if not self._writer.acquire(blocking=wait):
            return
        try:
            with self._lock:
                self._writing, self._changed = self._changed, {}
            if self._writing and self._state is not None:
                save_entries(self._state, self._writing)
        except BaseException as e:  # a full disk, Ctrl-C: the entries wait for the next try
            with self._lock:
                self._changed = {**self._writing, **self._changed}
            if wait or not isinstance(e, ClawError):
                raise
        finally:
            self._writing = {}
            self._writer.release()


def entries(state: State) -> dict[str, Entry]:
    """The `files` table: every file hashed, by project-relative path."""
    ctime = "ctime_ns" if state.has_ctime else "NULL"
    rows = state.select(f"SELECT path, mtime_ns, size, inode, {ctime}, sha256 FROM files")
    return {loaded_path(r[0]): (r[1], r[2], r[3], r[4], r[5]) for r in rows}


def save_entries(state: State, changed: dict[str, Entry]) -> None:
    with state.transaction():
        state.db.executemany(
            "INSERT OR REPLACE INTO files (path, mtime_ns, size, inode, ctime_ns, sha256) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(stored_path(path), *entry) for path, entry in changed.items()],
        )

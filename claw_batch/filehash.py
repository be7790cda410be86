"""Content hashes of project files with a stat shortcut: a file is re-read only when its
mtime, size or inode changed, so touching a file without changing it reruns nothing."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from claw_batch.state import Entry, State

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class FileHashes:
    """Backed by the `files` table of state.db: loaded when first needed (a run whose jobs
    all pass the quick check never needs it), written back in one batch."""

    def __init__(self, state: State | None, root: Path) -> None:
        self.root = root
        self._base = str(root)
        self._state = state  # None: nothing known, nothing saved (a new project)
        self._lock = threading.Lock()
        self._loaded: dict[str, Entry] | None = None
        self._changed: dict[str, Entry] = {}

    @property
    def _known(self) -> dict[str, Entry]:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._state.file_entries() if self._state else {}
            return self._loaded

    def hash(self, rel: str) -> str | None:
        """The sha256 of a project-relative file, or None when it does not exist."""
        try:
            st = os.stat(self.root / rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        entries = self._known
        known = entries.get(rel)
        if known is not None and known[:3] == key:
            return known[3]
        digest = sha256_file(self.root / rel)
        with self._lock:
            entries[rel] = self._changed[rel] = (*key, digest)
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

    def hashed_stamp(self, paths: Iterable[str]) -> str | None:
        """The stat keys the files had when they were hashed; None when one never was."""
        keys = []
        for rel in paths:
            entry = self._known.get(rel)
            if entry is None:
                return None
            keys.append(f"{entry[0]}:{entry[1]}:{entry[2]}")
        return ";".join(keys)

    def save(self) -> None:
        with self._lock:
            changed, self._changed = self._changed, {}
        if changed and self._state is not None:
            self._state.save_file_entries(changed)

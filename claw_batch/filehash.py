"""Content hashes of project files with a stat shortcut: a file is re-read only when its
mtime, size or inode changed, so touching a file without changing it reruns nothing."""

from __future__ import annotations

import hashlib
import os
import threading
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
    """Backed by the `files` table of state.db; loaded once, written back in one batch."""

    def __init__(self, state: State | None, root: Path) -> None:
        self.root = root
        self._state = state  # None: nothing known, nothing saved (a dry run, a new project)
        self._lock = threading.Lock()
        self._known: dict[str, Entry] = state.file_entries() if state else {}
        self._changed: dict[str, Entry] = {}

    def hash(self, rel: str) -> str | None:
        """The sha256 of a project-relative file, or None when it does not exist."""
        try:
            st = os.stat(self.root / rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            known = self._known.get(rel)
        if known is not None and known[:3] == key:
            return known[3]
        digest = sha256_file(self.root / rel)
        with self._lock:
            self._known[rel] = self._changed[rel] = (*key, digest)
        return digest

    def save(self) -> None:
        with self._lock:
            changed, self._changed = self._changed, {}
        if changed and self._state is not None:
            self._state.save_file_entries(changed)

"""The project as a cluster's jobs see it (--executor ray): every regular file under the root
but `.claw/` and `.git/`, content-addressed, shipped once per run and task view.

- A file is its sha256 (store.filehash.FileHashes, which the run already keeps: an unchanged
  file is not read again to hash it) and its permission bits (set-id bits dropped); each
  distinct content is read once and `Cluster.put` once, as a blob, whatever number of files
  or views hold it.
- A symlink is kept as a symlink when it resolves inside the project (a link to a folder or
  a file the project has, but `.claw/` and `.git/`), pointing there by a relative path,
  and dropped otherwise: a worker has no business following a link
  to the coordinator's host files, and the link would mean something else there anyway.
  FIFOs, sockets and devices are dropped.
- A task's view is the project as the run started, plus everything the jobs of the tasks it
  depends on (graph upstream, transitively) wrote in this run. What independent tasks wrote
  meanwhile is not in it: locally they race anyway, and a view that waits for nobody is one
  that a worker can cache.
- No secret travels: a file holding a value the coordinator's Redactor knows (a key in a
  `.env`) is shipped as the read tool shows it, redacted; the job sees the placeholder.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from claw_batch.safety.paths import NEVER_SEARCHED
from claw_batch.store.filehash import FileHashes
from claw_batch.taint.staged import StagedFiles

# What a file is in a snapshot: ("f", sha256, mode) or ("l", target, 0).
Entry = tuple[str, str, int]
FILE, LINK = "f", "l"
MODE_BITS = 0o777  # permission bits only: no set-id, no sticky bit travels


@dataclass(frozen=True)
class Snapshot:
    """One view of the project: what every file is, and a handle per content for
    `Worker.get`. `digest` names it (a worker's cache of it is keyed by it)."""

    digest: str
    entries: Mapping[str, Entry]
    blobs: Mapping[str, object] = field(default_factory=dict)  # sha256 -> Cluster.put handle
    # The working-tree copies of staged files (outside content, claw_batch.taint.staged), as
    # the coordinator found them when the view was made: path -> the file's sha256.
    staged: Mapping[str, str] = field(default_factory=dict)
    # Files shipped redacted (they hold a secret the coordinator knows): path -> (the sha256
    # shipped, the sha256 of the file itself), for the taint ledger's rows.
    redacted: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def digest_of(entries: Mapping[str, Entry]) -> str:
    text = json.dumps(sorted(entries.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def scan(root: Path, hash_file: Callable[[str], str | None]) -> dict[str, Entry]:
    """The project's files as a snapshot holds them (see the module's doc)."""
    found: dict[str, Entry] = {}
    real_root = os.path.realpath(root)
    for rel, st in _walk(str(root)):
        if stat.S_ISLNK(st.st_mode):
            real = os.path.realpath(os.path.join(root, rel))
            if real == real_root or not real.startswith(real_root + "/"):
                continue  # leaves the project: dropped
            top = real[len(real_root) + 1 :].split("/", 1)[0]
            if top in NEVER_SEARCHED:
                continue
            # Relative to where the link is, whatever it said: an absolute target would
            # name a path of the worker's machine.
            here = os.path.join(real_root, os.path.dirname(rel))
            found[rel] = (LINK, os.path.relpath(real, here), 0)
        elif stat.S_ISREG(st.st_mode):
            try:
                sha = hash_file(rel)
            except OSError:  # unreadable to claw: not shown to a job either
                continue
            if sha is not None:
                found[rel] = (FILE, sha, stat.S_IMODE(st.st_mode) & MODE_BITS)
    return found


def _walk(root: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry below `root` but directories, without following a symlink; `.claw` and
    `.git` (at any depth) left out."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            if e.name in NEVER_SEARCHED:
                continue
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
            else:
                yield rel, st


class Snapshots:
    """The coordinator's side for one run: the project scanned once (when the first job
    ships), each content put once, each task's view put once."""

    def __init__(
        self,
        root: Path,
        hashes: FileHashes,
        put: Callable[[object], object],
        upstream: Callable[[str], Sequence[str]],
        redact: Callable[[str], str] | None = None,
        secrets: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.hashes = hashes
        self.put = put  # Cluster.put
        self.upstream = upstream  # a task's upstream tasks, transitively
        self.redact = redact  # the run's Redactor: what it knows never travels
        self._secrets = tuple({s.encode() for s in secrets if s})  # what `redact` knows
        self._base: dict[str, Entry] | None = None
        self._blobs: dict[str, object] = {}  # sha256 shipped -> handle
        self._shown: dict[str, str] = {}  # a content's sha256 -> the sha256 shipped for it
        self._written: dict[str, dict[str, Entry | None]] = {}  # task -> what it wrote
        self._views: dict[str, object] = {}  # task -> its Snapshot's handle
        self._git = StagedFiles()
        self._lock = threading.Lock()

    def view(self, task: str) -> object:
        """The handle of the task's view (put the first time a job of it ships)."""
        with self._lock:
            handle = self._views.get(task)
            if handle is None:
                snapshot = self._snapshot(task)
                handle = self._views[task] = self.put(snapshot)
            return handle

    def wrote(self, task: str, rel: str, data: bytes | None, mode: int = 0) -> None:
        """A job of `task` changed `rel` in the real project (None: deleted it): the views
        of the tasks after it show it. Its content is put when a view first needs it (read
        back then from the project): most outputs no later task reads."""
        entry: Entry | None = None
        if data is not None:
            entry = (FILE, hashlib.sha256(data).hexdigest(), mode & MODE_BITS)
        with self._lock:
            self._written.setdefault(task, {})[rel] = entry

    def _snapshot(self, task: str) -> Snapshot:
        if self._base is None:
            self._base = scan(self.root, self.hashes.hash)
        entries = dict(self._base)
        for name in self.upstream(task):
            for rel, entry in self._written.get(name, {}).items():
                if entry is None:
                    entries.pop(rel, None)
                else:
                    entries[rel] = entry
        real: dict[str, str] = {}  # path -> its content's sha256, where another is shipped
        for rel, (kind, sha, mode) in list(entries.items()):
            if kind != FILE:
                continue
            if sha not in self._shown:
                data = self._read(rel)
                sha = hashlib.sha256(data).hexdigest()  # changed since it was hashed
                if sha not in self._shown:
                    shown = self._redacted(data)
                    shown_sha = hashlib.sha256(shown).hexdigest()
                    if shown_sha not in self._blobs:
                        self._blobs[shown_sha] = self.put(shown)
                    self._shown[sha] = shown_sha
            entries[rel] = (FILE, self._shown[sha], mode)
            if self._shown[sha] != sha:
                real[rel] = sha
        blobs = {sha: self._blobs[sha] for kind, sha, _ in entries.values() if kind == FILE}
        return Snapshot(
            digest_of(entries),
            entries,
            blobs,
            staged=self._staged(entries, real),
            redacted={rel: (entries[rel][1], sha) for rel, sha in real.items()},
        )

    def _redacted(self, data: bytes) -> bytes:
        """`data` as the read tool shows it when it holds a secret the Redactor knows;
        otherwise as it is."""
        if self.redact is None or not any(s in data for s in self._secrets):
            return data
        shown = self.redact(data.decode("utf-8", "surrogateescape"))
        return shown.encode("utf-8", "surrogateescape")

    def _staged(self, entries: Mapping[str, Entry], real: Mapping[str, str]) -> dict[str, str]:
        """The staged files' working-tree copies now (git asked once per change of the
        index): path -> the copy's sha256."""
        root = str(self.root)
        found = self._git.now(root)
        if not found.copies:
            return {}
        copies: dict[str, str] = {}
        for rel, _ in self._git.copies(root, found):
            entry = entries.get(rel)
            if entry is not None and entry[0] == FILE:
                copies[rel] = real.get(rel, entry[1])
        return copies

    def _read(self, rel: str) -> bytes:
        fd = os.open(self.root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
        finally:
            os.close(fd)

"""While something is staged, what in the project holds the staged changes: outside content,
as `git.staged_diff` shows it (claw_batch.taintledger). That is git's index, the loose
objects of the staged blobs, and each staged file's working-tree copy while it is the very
blob staged: a hook's task reads the files of the commit without asking git (`cat`, the
read tool, a linter), and gets the same bytes.

A copy changed after it was staged is the person's again (what they keep, they vouch for),
as a tainted file is once edited. git runs once per change of the index (no git call where
the project is not a repository, or nothing asks); a copy is hashed as git hashes a blob
(sha1, or sha256 in a sha256 repository, of `blob <size>\\0` and the bytes) once per change
of its stat key, the ctime included.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import threading
from dataclasses import dataclass, field

from claw_batch.childenv import scrubbed_env

INDEX = ".git/index"
FILE_MODES = frozenset({"100644", "100755"})  # a staged regular file (not a link, a submodule)
CHUNK = 1 << 20


@dataclass(frozen=True)
class Copy:
    blob: str  # the staged blob's id
    added: bool  # new to the repository: its name is the stager's too


@dataclass(frozen=True)
class Staged:
    objects: tuple[str, ...] = ()  # the index and the staged blobs' loose objects
    copies: dict[str, Copy] = field(default_factory=dict)  # working-tree path -> its blob


def staged(root: str) -> Staged:
    """What is staged now (nothing: no objects, no copies)."""
    git = os.path.join(root, ".git")
    args = ["git", f"--git-dir={git}", f"--work-tree={root}", "diff", "--cached", "--raw"]
    try:
        done = subprocess.run(
            [*args, "-z", "--no-abbrev", "--no-renames", "--no-ext-diff"],
            cwd=root,
            capture_output=True,
            timeout=30,
            env={**scrubbed_env(), "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return Staged((INDEX,))  # cannot tell: the index counts
    if done.returncode != 0 or not done.stdout:
        return Staged((INDEX,)) if done.returncode else Staged()
    blobs, copies = [], {}
    fields = done.stdout.split(b"\0")
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.decode(errors="replace").split()  # :old-mode mode old-id id status
        if len(parts) < 5 or parts[1] == "160000" or not parts[3].strip("0"):
            continue  # a submodule, or deleted: no blob
        blobs.append(f".git/objects/{parts[3][:2]}/{parts[3][2:]}")
        if parts[1] in FILE_MODES:
            copies[os.fsdecode(path)] = Copy(parts[3], parts[4].startswith("A"))
    return Staged((INDEX, *blobs), copies)


class StagedFiles:
    """`staged`, asked again only when the index has changed; which copies are staged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: tuple[tuple[str, tuple[int, ...]], Staged] | None = None
        self._ids: dict[str, tuple[tuple[int, ...], str | None]] = {}  # path -> key, blob id

    def now(self, root: str) -> Staged:
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(root, ".git")).st_mode):
                return Staged()  # a .git file names another directory: the sandbox mounts none
            st = os.lstat(os.path.join(root, INDEX))
        except OSError:
            return Staged()
        key = (root, (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns))
        known = self._known
        if known is None or known[0] != key:
            known = self._known = (key, staged(root))
        return known[1]

    def is_copy(self, root: str, rel: str, found: Staged | None = None) -> bool:
        """Whether the working-tree file is, as it is now, what is staged for it."""
        copy = (found or self.now(root)).copies.get(rel)
        return copy is not None and self._blob_id(root, rel, len(copy.blob)) == copy.blob

    def copies(self, root: str, found: Staged) -> list[tuple[str, Copy]]:
        copies = sorted(found.copies.items())
        return [(rel, c) for rel, c in copies if self.is_copy(root, rel, found)]

    def _blob_id(self, root: str, rel: str, length: int) -> str | None:
        path = os.path.join(root, rel)
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns, length)
        with self._lock:
            known = self._ids.get(rel)
        if known is not None and known[0] == key:
            return known[1]
        blob = _blob_id(path, st.st_size, "sha1" if length == 40 else "sha256")
        with self._lock:
            self._ids[rel] = (key, blob)
        return blob


def _blob_id(path: str, size: int, algorithm: str) -> str | None:
    digest = hashlib.new(algorithm, b"blob %d\0" % size)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        total = 0
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
            total += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return digest.hexdigest() if total == size else None  # changed while read: not the copy

"""While something is staged, what in the project holds the staged changes: outside content,
as `git.staged_diff` shows it (claw_batch.taint.ledger). That is git's index, the loose
objects of the staged blobs, and each staged file's working-tree copy while it is the very
blob staged: a hook's task reads the files of the commit without asking git (`cat`, the
read tool, a linter), and gets the same bytes.

Committed, outside content stays in git's object store whatever becomes of the file: a
`git show`, a `git log -p` reads it there. `stored` names the loose object of each such
blob, and when one is only in a pack, every pack (a command reading any packed object opens
them: counted as reading outside content, the safe way to be wrong).

A copy changed after it was staged is the person's again (what they keep, they vouch for),
as a tainted file is once edited. git runs once per change of the index (no git call where
the project is not a repository, or nothing asks); a copy is hashed as git hashes a blob
(sha1, or sha256 in a sha256 repository, of `blob <size>\\0` and the bytes) once per change
of its stat key, the ctime included.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import threading
from dataclasses import dataclass, field

from claw_batch.safety.childenv import scrubbed_env

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
        self._packed: tuple[tuple[object, ...], dict[str, bool]] = ((), {})  # packs' key -> has

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
        return copy is not None and self.blob_id(root, rel, len(copy.blob)) == copy.blob

    def copies(self, root: str, found: Staged) -> list[tuple[str, Copy]]:
        copies = sorted(found.copies.items())
        return [(rel, c) for rel, c in copies if self.is_copy(root, rel, found)]

    def in_packs(self, root: str, packs: list[str], blobs: list[str]) -> dict[str, bool]:
        """Which of the blobs the packs hold: git asked once per change of the packs."""
        key = (root, *((rel, _stat_key(os.path.join(root, rel))) for rel in packs))
        with self._lock:
            known = self._packed[1] if self._packed[0] == key else {}
        missing = [b for b in blobs if b not in known]
        if missing:
            known = {**known, **in_store(root, missing)}
            with self._lock:
                self._packed = (key, known)
        return {b: known[b] for b in blobs}

    def blob_id(self, root: str, rel: str, length: int) -> str | None:
        """The file's git blob id as it is now (sha1: 40 hex digits, sha256: 64), hashed
        once per change of its stat key."""
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
    found = _blob_ids(path, size, (algorithm,))
    return found[0] if found else None


def _blob_ids(path: str, size: int, algorithms: tuple[str, ...]) -> tuple[str, ...]:
    """The file's git blob ids by each algorithm, in one read (none: it changed meanwhile,
    or cannot be read)."""
    digests = [hashlib.new(a, b"blob %d\0" % size) for a in algorithms]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return ()
    try:
        total = 0
        while chunk := os.read(fd, CHUNK):
            for digest in digests:
                digest.update(chunk)
            total += len(chunk)
    except OSError:
        return ()
    finally:
        os.close(fd)
    if total != size:  # changed while read: not the copy
        return ()
    return tuple(d.hexdigest() for d in digests)


# --- outside content committed: git's object store -----------------------------------------

OBJECTS = ".git/objects"
PACKS = ".git/objects/pack"


def blob_ids(data: bytes) -> tuple[str, str]:
    """The git blob ids of `data`: in a sha1 repository and in a sha256 one."""
    header = b"blob %d\0" % len(data)
    return hashlib.sha1(header + data).hexdigest(), hashlib.sha256(header + data).hexdigest()


def file_blob_ids(path: str) -> tuple[str, ...]:
    """`blob_ids` of the file as it is now (none when it cannot be read whole)."""
    try:
        size = os.lstat(path).st_size
    except OSError:
        return ()
    return _blob_ids(path, size, ("sha1", "sha256"))


def has_objects(root: str) -> bool:
    """Whether the project is a repository with an object store of its own."""
    return _isdir(root, OBJECTS) and _isdir(root, ".git")


def stored(root: str, files: StagedFiles, blobs: dict[str, str]) -> dict[str, str]:
    """Where git's object store holds the blobs (blob id -> what each is read as): each one's
    loose object, and every pack when one is only in a pack (git reads a pack for any object
    in it: whichever a command opens counts). A path -> what it is read as."""
    found: dict[str, str] = {}
    packed: dict[str, str] = {}
    for blob, shown in sorted(blobs.items()):
        loose = f"{OBJECTS}/{blob[:2]}/{blob[2:]}"
        if stat.S_ISREG(_mode(os.path.join(root, loose))):
            found[loose] = shown
        else:
            packed.setdefault(blob, shown)
    packs = _packs(root)
    if packed and packs:
        has = files.in_packs(root, packs, list(packed))
        in_packs = [shown for b, shown in sorted(packed.items()) if has[b]]
        if in_packs:
            found.update(dict.fromkeys(packs, in_packs[0]))
    return found


def _packs(root: str) -> list[str]:
    try:
        names = os.listdir(os.path.join(root, PACKS))
    except OSError:
        return []
    return sorted(f"{PACKS}/{n}" for n in names if n.endswith(".pack"))


def in_store(root: str, blobs: list[str]) -> dict[str, bool]:
    """Which of the blobs git has (one `git cat-file` for all; when it cannot tell: all)."""
    git = os.path.join(root, ".git")
    try:
        done = subprocess.run(
            ["git", f"--git-dir={git}", "cat-file", "--batch-check=%(objectname) %(objecttype)"],
            input="".join(f"{b}\n" for b in blobs).encode(),
            capture_output=True,
            timeout=30,
            env={**scrubbed_env(), "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return dict.fromkeys(blobs, True)
    if done.returncode != 0:
        return dict.fromkeys(blobs, True)
    lines = done.stdout.decode(errors="replace").splitlines()
    has = {line.split()[0] for line in lines if line.endswith(" blob")}
    return {b: b in has for b in blobs}


def sha256_repository(root: str) -> bool:
    """Whether the repository names its objects by sha256 (git's `objectformat`)."""
    try:
        with open(os.path.join(root, ".git/config"), "rb") as f:
            config = f.read(1 << 16)
    except OSError:
        return False
    return re.search(rb"(?im)^\s*objectformat\s*=\s*sha256\s*$", config) is not None


def _stat_key(path: str) -> tuple[int, ...]:
    try:
        st = os.lstat(path)
    except OSError:
        return ()
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _isdir(root: str, rel: str) -> bool:
    return stat.S_ISDIR(_mode(os.path.join(root, rel)))

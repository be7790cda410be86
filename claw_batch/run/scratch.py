"""Where a cluster's job runs on its worker: a private scratch copy of its snapshot
(claw_batch.run.snapshot), and what the job changed there when it ends.

A node keeps each snapshot once, in `$TMPDIR/claw-ray-<uid>/snap-<digest>/` (the folder
0700 and this user's, or refused), built under a file lock (the jobs of one node that need it
together build it once) into a temp folder renamed into place (a worker killed halfway leaves
no half snapshot under the real name). A job gets a copy of it — copies, not hardlinks: a
job's command could write through a link into the cache — in `job-<pid>-<random>/`, removed
when the job ends whatever happened; a later job on the node removes what a killed worker
left (its pid is gone), and a snapshot no job has used for a day."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import heapq
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from claw_batch.errors import TaskFailed
from claw_batch.run.snapshot import FILE, LINK, MODE_BITS, Snapshot

Key = tuple[int, int, int, int, int]  # ino, ctime_ns, mtime_ns, size, mode
KEEP_S = 24 * 3600.0  # a snapshot no job of the node has used for this long is removed
# What one cluster's job may bring back (`changes`): bytes by the files' sizes (the task's
# limits.disk, this when none is given: the sandbox's default), and files changed.
MAX_BYTES = 4 << 30
MAX_FILES = 100_000


@dataclass(frozen=True)
class Change:
    """A path the job changed in its scratch copy: written (`data`, `mode`), deleted
    (`data` None), or made something claw does not bring back (`kind` "link", "special")."""

    rel: str
    kind: str  # file | delete | link | special
    data: bytes | None = None
    mode: int = 0o644


def cache_dir() -> Path:
    """This user's node-local cache, made 0700; refused when someone else's or a link."""
    base = Path(os.environ.get("TMPDIR") or "/tmp") / f"claw-ray-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise TaskFailed(
            f"{base} is not a folder of this user's that only they can open: claw keeps the "
            "jobs' copies of the project there; remove it, or set TMPDIR elsewhere"
        )
    return base


def materialize(snapshot: Snapshot, get: Callable[[object], object]) -> Path:
    """The snapshot's folder on this node, built once (see the module's doc)."""
    base = cache_dir()
    final = base / f"snap-{snapshot.digest}"
    if final.is_dir():
        return final
    with open(base / f"snap-{snapshot.digest}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():  # another job of this node built it meanwhile
            return final
        building = base / f"snap-{snapshot.digest}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            _build(building, snapshot, get)
            os.rename(building, final)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return final


def _build(where: Path, snapshot: Snapshot, get: Callable[[object], object]) -> None:
    where.mkdir(mode=0o700)
    for rel, (kind, value, mode) in sorted(snapshot.entries.items()):
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == LINK:
            os.symlink(value, path)
            continue
        data = get(snapshot.blobs[value])
        if not isinstance(data, bytes) or hashlib.sha256(data).hexdigest() != value:
            raise TaskFailed(f"the project's copy of {rel} arrived damaged; run again")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode & MODE_BITS)


@contextlib.contextmanager
def scratch(
    snapshot: Snapshot, get: Callable[[object], object], *, linked: bool = False
) -> Iterator[Path]:
    """A private copy of the snapshot for one job, removed when it ends. `linked`: its files
    are hard links to the node's snapshot, not copies — for a job that runs no command
    (no bash): claw's tools never write a file in place (they write a new one and rename it
    over: safety.atomic), so nothing the job does can reach the snapshot through a link, and
    a copy of the project per job (what dominates a fan-out's time on a worker) is saved."""
    source = materialize(snapshot, get)
    base = source.parent
    sweep(base)
    root = base / f"job-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        with open(f"{source}.lock", "a") as lock:  # no sweep removes it while it is copied
            fcntl.flock(lock, fcntl.LOCK_SH)
            if not source.is_dir():  # swept between its check and this lock: built again
                fcntl.flock(lock, fcntl.LOCK_UN)
                source = materialize(snapshot, get)
                fcntl.flock(lock, fcntl.LOCK_SH)
            os.utime(source)  # used now: kept for KEEP_S more
            copy = os.link if linked else shutil.copy2
            shutil.copytree(source, root, symlinks=True, copy_function=copy)
        os.chmod(root, 0o700)
        yield root
    finally:
        _remove(root)


def sweep(base: Path, *, now: float | None = None) -> list[str]:
    """Remove the job copies and half-built snapshots of worker processes that are gone,
    and the snapshots no job of this node has used for KEEP_S (none being copied)."""
    removed = []
    now = time.time() if now is None else now
    for entry in os.scandir(base):
        name = entry.name
        if name.startswith("snap-") and "." not in name:
            if entry.stat(follow_symlinks=False).st_mtime < now - KEEP_S and _unused(entry):
                removed.append(name)
            continue
        if name.startswith("job-"):
            pid = name.split("-")[1]
        elif ".tmp-" in name:
            pid = name.rsplit(".tmp-", 1)[1].split("-")[0]
        else:
            continue
        if pid.isdigit() and not _alive(int(pid)):
            _remove(Path(entry.path))
            removed.append(name)
    return removed


def _unused(entry: os.DirEntry[str]) -> bool:
    """Removes the snapshot if no job is copying it now; whether it did."""
    with open(f"{entry.path}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        _remove(Path(entry.path))
        os.unlink(f"{entry.path}.lock")
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(root: Path) -> None:
    """rmtree, also of folders a job's command made unreadable or unwritable."""

    def again(func: Callable[..., object], path: str, _: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
            func(path)

    shutil.rmtree(root, onerror=again)


def keys(root: Path, *, linked: bool = False) -> dict[str, Key]:
    """What each entry of the copy is now (taken right after the copy is made)."""
    return {rel: _key(st, linked) for rel, st in _entries(root)}


def _key(st: os.stat_result, linked: bool) -> Key:
    """What says an entry changed. A linked file's ctime moves whenever another job of the
    node links or unlinks it, and it cannot be written in place (`scratch`): a new inode
    (a rename over it) says it changed, its ctime is left out."""
    return (st.st_ino, 0 if linked else st.st_ctime_ns, st.st_mtime_ns, st.st_size, st.st_mode)


def changes(
    root: Path,
    snapshot: Snapshot,
    before: Mapping[str, Key],
    *,
    linked: bool = False,
    max_bytes: int = MAX_BYTES,
    max_files: int | None = None,
) -> list[Change]:
    """What the job changed in its copy: each entry whose inode, ctime, mtime, size or mode
    moved is looked at (a file rewritten with the same bytes and mode is no change).
    Bounded before any file is read: TaskFailed when the changed files hold more than
    `max_bytes` by their sizes (a sparse file counts its size: it comes back whole) or
    are more than `max_files` (MAX_FILES by default)."""
    found: list[Change] = []
    seen: set[str] = set()
    moved: list[tuple[str, os.stat_result]] = []
    for rel, st in _entries(root):
        seen.add(rel)
        if before.get(rel) != _key(st, linked) or rel not in snapshot.entries:
            moved.append((rel, st))
    _bounded(moved, max_bytes, MAX_FILES if max_files is None else max_files)
    for rel, st in moved:
        was = snapshot.entries.get(rel)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(root / rel)
            if was != (LINK, target, 0):
                found.append(Change(rel, "link"))
        elif stat.S_ISREG(st.st_mode):
            data = _read(root / rel)
            mode = stat.S_IMODE(st.st_mode) & MODE_BITS
            if was != (FILE, hashlib.sha256(data).hexdigest(), mode):
                found.append(Change(rel, "file", data, mode))
        else:
            found.append(Change(rel, "special"))
    for rel in snapshot.entries:
        if rel not in seen:
            found.append(Change(rel, "delete"))
    return sorted(found, key=lambda c: c.rel)


def _bounded(moved: list[tuple[str, os.stat_result]], max_bytes: int, max_files: int) -> None:
    """TaskFailed when what the job changed is more than a cluster brings back."""
    files = [(st.st_size, rel) for rel, st in moved if stat.S_ISREG(st.st_mode)]
    total = sum(size for size, _ in files)
    if total <= max_bytes and len(moved) <= max_files:
        return
    from claw_batch.sandbox.ceilings import shown

    biggest = ", ".join(f"{rel} ({shown(size)})" for size, rel in heapq.nlargest(3, files))
    if len(moved) > max_files:
        what = f"{len(moved):,} files changed, more than the {max_files:,} a cluster's job"
        what += " may bring back"
    else:
        what = (
            f"{shown(total)} of files changed, more than limits.disk ({shown(max_bytes)}) a "
            "cluster's job may bring back (by their sizes: a sparse file comes back whole)"
        )
    raise TaskFailed(f"{what}; the biggest: {biggest or 'none'}; nothing the job wrote was applied")


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except PermissionError:  # a command took its read permission: given back to read it
        os.chmod(path, 0o600)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _entries(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry below `root` but folders, symlinks not followed."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        path = root / rel_dir if rel_dir else root
        try:
            with os.scandir(path) as it:
                listed = list(it)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):  # a command made it unreadable
                os.chmod(path, 0o700)
                stack.append(rel_dir)
                continue
            raise
        for entry in listed:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
            else:
                yield rel, st

"""Write a file so that readers, and a crash at any moment, see either the old or the new bytes.

The bytes go first to a temp file beside the target, named `.NAME.claw-PID-RANDOM.tmp`: the
marker says it is claw's, the pid whose. A writer killed between creating and renaming it
(`kill -9`, power loss) leaves it behind; `sweep` removes those of writers that are gone. A
directory is swept before this process first writes into it, and a run sweeps the folders
where its tasks write when it starts (`tempsweep`).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from claw_batch import baton

TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
STEP_FLAGS = DIR_FLAGS | os.O_NOFOLLOW
TEMP = re.compile(r"\..*\.claw-(?P<pid>[1-9][0-9]{0,9})-[0-9a-f]{8}\.tmp", re.DOTALL)
NAME_BYTES = 96  # of the target's name in its temp's: the whole stays within NAME_MAX
STARTED_NS = time.time_ns()  # a temp changed since may be a live writer's (see _stale)

_pid = os.getpid()  # read once, not a system call per write (a forked child reads its own)
_swept: set[tuple[int, int]] = set()  # (st_dev, st_ino) of the directories swept
_swept_lock = threading.Lock()


def write_atomic(path: Path, data: bytes | str | Iterable[bytes]) -> None:
    """Replace `path` by `data` (or its pieces, in order) via a temp file in the same
    directory, fsync and rename.

    Parent directories are created; an existing file keeps its permission bits, a new one
    gets the default permissions (0o666 minus the umask).
    """
    try:
        directory = os.open(path.parent, DIR_FLAGS)
    except FileNotFoundError:  # a new directory: made only when needed
        path.parent.mkdir(parents=True, exist_ok=True)
        directory = os.open(path.parent, DIR_FLAGS)
    try:
        write_atomic_in(directory, path.name, data)
    finally:
        os.close(directory)


def write_atomic_in(
    directory: int,
    name: str,
    data: bytes | str | Iterable[bytes],
    *,
    synced: DirSyncs | None = None,
) -> None:
    """write_atomic for `name` in an open directory (an fd): every step is relative to it, so
    once the caller has checked where the directory is, nothing can send the bytes elsewhere.
    With `synced`, the directory's fsync (which makes the rename durable) is left to it."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    _sweep_once(directory)
    try:
        mode: int | None = stat.S_IMODE(os.stat(name, dir_fd=directory).st_mode)
    except FileNotFoundError:
        mode = None
    tmp = temp_name(name)
    fd = os.open(tmp, TMP_FLAGS, 0o666, dir_fd=directory)
    try:
        try:
            for piece in (data,) if isinstance(data, bytes | bytearray) else data:
                view = memoryview(piece)
                while view:
                    view = view[os.write(fd, view) :]
            if mode is not None:
                # Less any set-id bit, as the kernel drops it when someone without CAP_FSETID
                # writes a file: the new content is not the program its owner made set-id.
                os.fchmod(fd, mode & ~(stat.S_ISUID | stat.S_ISGID))
            if synced is None:  # the memory tool and cassettes write under a lock of theirs
                os.fsync(fd)
            else:  # a job's output, under no lock: other jobs run while the disk works
                with baton.released():
                    os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=directory)
        raise
    if synced is not None:
        synced.add(directory)
        return
    # Makes the rename itself durable; some filesystems refuse to fsync a directory.
    with contextlib.suppress(OSError):
        os.fsync(directory)


class DirSyncs:
    """Directories whose renames wait for their fsync, made together by `sync`: the outputs
    of the jobs that end at the same moment, written into one folder, cost one fsync of it
    rather than one each (a millisecond to tens of them on a real disk). Whoever relies on
    the renames being durable (the ledger, before it records those jobs as done) calls
    `sync` first; a directory that is not synced is never claimed to be."""

    def __init__(self) -> None:
        self._fds: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> a dup of its fd
        self._lock = threading.Lock()
        # One sync at a time: a directory added while another sync is under way was found
        # waiting by it, and a later sync must not return before that fsync is done.
        self._syncing = threading.Lock()

    def add(self, directory: int) -> None:
        """`directory` (an open fd, left open) holds a rename to make durable; fsynced at
        once if it cannot be kept (no fd left to dup)."""
        try:
            st = os.fstat(directory)
            with self._lock:
                if (st.st_dev, st.st_ino) not in self._fds:
                    self._fds[st.st_dev, st.st_ino] = os.dup(directory)
        except OSError:
            with contextlib.suppress(OSError):
                os.fsync(directory)

    def sync(self) -> None:
        """Every rename added so far is durable when this returns (as far as the filesystem
        can fsync a directory: some refuse to, as write_atomic knows)."""
        with self._syncing:
            with self._lock:
                fds, self._fds = list(self._fds.values()), {}
            for fd in fds:
                try:
                    with contextlib.suppress(OSError):
                        os.fsync(fd)
                finally:
                    os.close(fd)


def temp_name(name: str) -> str:
    """The temp file's name for a write of `name`. The random part needs no strong randomness
    (O_EXCL refuses a clash): `random` makes it without a system call, of which each one here
    hands the GIL to another job."""
    head = os.fsdecode(os.fsencode(name)[:NAME_BYTES])
    return f".{head}.claw-{_pid}-{random.getrandbits(32):08x}.tmp"


def sweep(directory: int, *, before_ns: int = STARTED_NS) -> list[str]:
    """Remove claw's stale temp files from an open directory; returns their names. Stale: of
    claw's pattern, a regular file of this user's, last changed before `before_ns`, and its
    writer's pid is no live process. Both, because either alone can be wrong: a pid means
    nothing to a claw in another PID namespace (a container sharing the folder), and a writer
    that started earlier may still be about to rename its temp."""
    removed = []
    for name in os.listdir(directory):  # not scandir: a folder of 10,000 outputs in 60 % the time
        if name.endswith(".tmp") and _stale(directory, name, before_ns):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=directory)
                removed.append(name)
    return removed


def sweep_below(root: Path, folders: Iterable[str], *, before_ns: int) -> list[str]:
    """`sweep` each project-relative folder that exists, opened one step at a time without
    following a symlink (a folder swapped for a symlink is not swept); returns what went, as
    project-relative paths. A folder that cannot be read is left as it is."""
    removed = []
    for rel in dict.fromkeys(folders):
        with contextlib.suppress(OSError):
            fd = _open_below(root, rel)
            try:
                removed += [
                    n if rel in ("", ".") else f"{rel}/{n}" for n in sweep(fd, before_ns=before_ns)
                ]
            finally:
                os.close(fd)
    return removed


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def _sweep_once(directory: int) -> None:
    """Sweep a directory the first time this process writes into it; never fails a write."""
    with contextlib.suppress(OSError):
        st = os.fstat(directory)
        with _swept_lock:
            if (st.st_dev, st.st_ino) in _swept:
                return
            _swept.add((st.st_dev, st.st_ino))
        sweep(directory)


def _stale(directory: int, name: str, before_ns: int) -> bool:
    match = TEMP.fullmatch(name)
    if match is None:
        return False
    try:
        st = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_uid == os.geteuid()
        and st.st_mtime_ns < before_ns
        and not _alive(int(match["pid"]))
    )


def _alive(pid: int) -> bool:
    if pid == _pid:
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; not a pid here
        return True
    return True


def _open_below(root: Path, rel: str) -> int:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise FileNotFoundError(rel)  # not below the root
    fd = os.open(root, DIR_FLAGS)
    for part in parts:
        try:
            step = os.open(part, STEP_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = step
    return fd

"""A cluster job's changes applied to the real project, on the coordinator, only when the
job succeeded: every path checked first with the job's own Policy on the real root (its
write globs and outputs, protected and control files, what its task grants), as the job's
tools would have been checked; one refused path fails the job and nothing is applied. Then
all or nothing as far as a filesystem allows: every file staged as a temp beside its target
and fsynced, the taint marks written to the ledger (before the content lands, as
JobTaint.writing does), then the renames; any error before the renames removes every temp.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.errors import TaskFailed, ToolError
from claw_batch.run.scratch import Change
from claw_batch.safety.atomic import TMP_FLAGS, DirSyncs, temp_name
from claw_batch.safety.paths import Policy
from claw_batch.safety.safeopen import kind, writable_dir
from claw_batch.taint.ledger import TaintedFiles, Writer
from claw_batch.taint.staged import blob_ids
from claw_batch.taint.view import Mark

NOT_BROUGHT = {
    "link": "a symlink",
    "special": "a FIFO, socket or device",
}


@dataclass(frozen=True)
class Taint:
    """What the job read and marked, for the real ledger."""

    files: TaintedFiles | None
    writer: Writer
    source: str | None  # the outside content it read (None: none)
    marks: Sequence[Mark] = ()


@dataclass
class _Staged:
    change: Change
    folder: Path  # the target's folder (open in `_Folders` while it is worked on)
    name: str
    temp: str | None  # None: a deletion


OPEN_FOLDERS = 32  # folder descriptors one apply holds at most (a job may write thousands)


class _Folders:
    """The target folders' descriptors, a few open at a time: each one checked to be that
    very folder when first opened (safeopen.writable_dir) and, opened again, to be the same
    one still (device and inode), or TaskFailed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._open: dict[Path, int] = {}  # in the order last used
        self._ids: dict[Path, tuple[int, int]] = {}

    def fd(self, folder: Path, shown: str) -> int:
        fd = self._open.pop(folder, None)
        if fd is None:
            fd = self._opened(folder, shown)
        self._open[folder] = fd
        while len(self._open) > OPEN_FOLDERS:
            os.close(self._open.pop(next(iter(self._open))))
        return fd

    def _opened(self, folder: Path, shown: str) -> int:
        try:
            fd = writable_dir(self.root, folder, shown)
        except ToolError as e:
            raise TaskFailed(f"{e}; nothing the job wrote was applied") from None
        st = os.fstat(fd)
        known = self._ids.setdefault(folder, (st.st_dev, st.st_ino))
        if known != (st.st_dev, st.st_ino):
            os.close(fd)
            raise TaskFailed(f"{shown}: its folder was replaced while claw applied the job's files")
        return fd

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])


def apply(
    policy: Policy,
    changes: Sequence[Change],
    taint: Taint,
    *,
    synced: DirSyncs,
    wrote: Callable[[str, bytes | None, int], None] = lambda *_: None,
) -> None:
    """Apply the job's changes (see the module's doc); TaskFailed, with nothing applied,
    when one is refused or cannot be staged. `wrote` is told of each change applied.
    Folder by folder, so that a few descriptors are open at a time (_Folders)."""
    for c in changes:
        if c.kind in NOT_BROUGHT:
            raise TaskFailed(
                f"{c.rel}: the job made it {NOT_BROUGHT[c.kind]}; claw brings back only "
                "regular files from a cluster's job, so nothing it wrote was applied"
            )
    checked = sorted(
        ((c, _checked(policy, c)) for c in changes), key=lambda cr: (cr[1].parent, cr[1].name)
    )
    folders = _Folders(policy.root)
    staged: list[_Staged] = []
    try:
        for c, real in checked:
            staged.append(_stage(c, real, folders))
        _mark(taint, changes)
        # Each folder's renames made durable: with the run's other writes (DirSyncs keeps a
        # descriptor of each), or here and now when the job wrote into many folders.
        many = len({s.folder for s in staged}) > OPEN_FOLDERS
        for i, s in enumerate(staged):
            directory = folders.fd(s.folder, s.change.rel)
            _land(s, directory)
            if not many:
                synced.add(directory)
            elif i + 1 == len(staged) or staged[i + 1].folder != s.folder:
                with contextlib.suppress(OSError):  # as write_atomic: some refuse to
                    os.fsync(directory)
    except BaseException:
        for s in staged:
            if s.temp is not None:
                with contextlib.suppress(OSError, TaskFailed):
                    os.unlink(s.temp, dir_fd=folders.fd(s.folder, s.change.rel))
        raise
    finally:
        folders.close()
    _clear(taint, changes)
    for c in changes:
        wrote(c.rel, c.data if c.kind == "file" else None, c.mode)


def _checked(policy: Policy, c: Change) -> Path:
    try:
        return policy.resolve_write(c.rel)
    except ToolError as e:
        raise TaskFailed(f"{e}; so nothing the job wrote was applied") from None


def _stage(c: Change, real: Path, folders: _Folders) -> _Staged:
    """The change ready to land: its folder open (and checked), its bytes in a temp file
    beside its target, fsynced."""
    directory = folders.fd(real.parent, c.rel)
    staged = _Staged(c, real.parent, real.name, None)
    try:
        try:
            mode = os.stat(real.name, dir_fd=directory, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise TaskFailed(f"{c.rel} is {kind(mode)} here; nothing the job wrote was applied")
        if c.kind == "delete" or c.data is None:
            return staged
        temp = temp_name(real.name)
        fd = os.open(temp, TMP_FLAGS, 0o600, dir_fd=directory)
        staged.temp = temp
        with os.fdopen(fd, "wb") as f:
            f.write(c.data)
            f.flush()
            os.fchmod(f.fileno(), c.mode & 0o777)
            os.fsync(f.fileno())
    except BaseException as e:  # this one is not in the caller's list yet
        if staged.temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(staged.temp, dir_fd=directory)
        if isinstance(e, OSError):
            shown = e.strerror or str(e)
            raise TaskFailed(f"{c.rel}: {shown}; nothing the job wrote was applied") from e
        raise
    return staged


def _land(s: _Staged, directory: int) -> None:
    if s.temp is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(s.name, dir_fd=directory)
    else:
        os.rename(s.temp, s.name, src_dir_fd=directory, dst_dir_fd=directory)
        s.temp = None


def _mark(taint: Taint, changes: Sequence[Change]) -> None:
    """A tainted job's files, and those its tools marked, are outside content: recorded
    before they land."""
    if taint.files is None:
        return
    marked = {m.rel: m for m in taint.marks}
    for c in changes:
        if c.kind != "file" or c.data is None:
            continue
        mark = marked.get(c.rel)
        source = mark.source if mark is not None else taint.source
        if source is not None:
            sha = hashlib.sha256(c.data).hexdigest()
            taint.files.mark(c.rel, sha, source, taint.writer, blob_ids(c.data))


def _clear(taint: Taint, changes: Sequence[Change]) -> None:
    """An untainted job's writes clear the files' rows, as locally."""
    if taint.files is None or taint.source is not None:
        return
    marked = {m.rel for m in taint.marks}
    for c in changes:
        if c.kind == "file" and c.rel not in marked:
            taint.files.clear(c.rel)

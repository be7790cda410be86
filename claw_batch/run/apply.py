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
    directory: int  # an fd of the target's folder
    name: str
    temp: str | None  # None: a deletion


def apply(
    policy: Policy,
    changes: Sequence[Change],
    taint: Taint,
    *,
    synced: DirSyncs,
    wrote: Callable[[str, bytes | None, int], None] = lambda *_: None,
) -> None:
    """Apply the job's changes (see the module's doc); TaskFailed, with nothing applied,
    when one is refused or cannot be staged. `wrote` is told of each change applied."""
    for c in changes:
        if c.kind in NOT_BROUGHT:
            raise TaskFailed(
                f"{c.rel}: the job made it {NOT_BROUGHT[c.kind]}; claw brings back only "
                "regular files from a cluster's job, so nothing it wrote was applied"
            )
    checked = [(c, _checked(policy, c)) for c in changes]
    dirs: dict[Path, int] = {}  # each target folder opened once (a job may write thousands)
    staged: list[_Staged] = []
    try:
        for c, real in checked:
            staged.append(_stage(policy.root, c, real, dirs))
        _mark(taint, changes)
        for s in staged:
            _land(s, synced)
    except BaseException:
        for s in staged:
            if s.temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(s.temp, dir_fd=s.directory)
        raise
    finally:
        for fd in dirs.values():
            os.close(fd)
    _clear(taint, changes)
    for c in changes:
        wrote(c.rel, c.data if c.kind == "file" else None, c.mode)


def _checked(policy: Policy, c: Change) -> Path:
    try:
        return policy.resolve_write(c.rel)
    except ToolError as e:
        raise TaskFailed(f"{e}; so nothing the job wrote was applied") from None


def _stage(root: Path, c: Change, real: Path, dirs: dict[Path, int]) -> _Staged:
    """The change ready to land: its folder open (and checked), its bytes in a temp file
    beside its target, fsynced."""
    directory = dirs.get(real.parent)
    if directory is None:
        try:
            directory = dirs[real.parent] = writable_dir(root, real.parent, c.rel)
        except ToolError as e:
            raise TaskFailed(f"{e}; nothing the job wrote was applied") from None
    staged = _Staged(c, directory, real.name, None)
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


def _land(s: _Staged, synced: DirSyncs) -> None:
    if s.temp is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(s.name, dir_fd=s.directory)
    else:
        os.rename(s.temp, s.name, src_dir_fd=s.directory, dst_dir_fd=s.directory)
        s.temp = None
    synced.add(s.directory)


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

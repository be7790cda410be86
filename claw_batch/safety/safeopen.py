"""Open exactly the path a policy check approved, never what a symlink swapped in since.

`Policy` decides on a resolved path. Between that check and an open, a directory on the way
can be renamed and replaced by a symlink to elsewhere (another job's bash, whoever writes into a
watched folder), and an open by path would follow it. So a path is opened without following a
symlink at its last step, as O_PATH — which opens nothing: no FIFO blocks, no device driver
runs — and the kernel says where the opened file is (`/proc/self/fd/N`). Unless that is the
path that was checked, nothing is read or written. Content is then read through the fd's own
link, so what is read is the very file that was checked; writes happen inside a directory fd
checked the same way (see `atomic.write_atomic_in`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from claw_batch.errors import ToolError
from claw_batch.safety.atomic import DirSyncs, write_atomic_in

PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OutOfFds(ToolError):
    """The process has no file descriptor left (EMFILE, ENFILE): not the file's fault."""


def link(fd: int) -> str:
    """A path that opens the same file as `fd` (also for ripgrep, which takes paths)."""
    return f"/proc/self/fd/{fd}"


@contextlib.contextmanager
def opened(real: Path, shown: str) -> Iterator[tuple[int, os.stat_result]]:
    """An O_PATH fd of `real` and its lstat; ToolError if it is missing or has moved."""
    fd, st = open_checked(real, shown)
    try:
        yield fd, st
    finally:
        os.close(fd)


def open_checked(real: Path, shown: str) -> tuple[int, os.stat_result]:
    """`opened` for a caller that closes the fd itself."""
    try:
        fd = os.open(real, PATH_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"no such file or directory: {shown}") from None
    except OSError as e:
        error = OutOfFds if e.errno in (errno.EMFILE, errno.ENFILE) else ToolError
        raise error(f"cannot access {shown}: {e.strerror}") from None
    try:
        _same_place(fd, str(real), shown, "nothing was read")
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):  # the path was checked with its symlinks resolved
            raise ToolError(_moved(shown, "nothing was read"))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_file(real: Path, shown: str, limit: int) -> bytes:
    """Up to limit + 1 bytes of the regular file at `real` (a path a check approved)."""
    return read_head(real, shown, limit)[0]


def read_head(real: Path, shown: str, limit: int) -> tuple[bytes, int]:
    """As read_file, and the file's size then (what a cut at `limit` leaves out)."""
    with opened(real, shown) as (fd, st):
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{shown} is not a regular file ({kind(st.st_mode)}); refused")
        data = read_bytes(fd, st.st_size, limit)
        return data, max(st.st_size, len(data))  # it may have grown since fstat


def read_bytes(fd: int, size: int, limit: int) -> bytes:
    """Up to limit + 1 bytes of the regular file behind an O_PATH fd, in reads of the size
    fstat gave (plus one, to see that the file ended) rather than a buffered read that would
    map a `limit`-sized buffer each time."""
    f = os.open(link(fd), os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts: list[bytes] = []
        got = 0
        while got <= limit:
            ask = min(max(size + 1 - got, 65536 if got else 1), limit + 1 - got)
            chunk = os.read(f, ask)
            parts.append(chunk)
            got += len(chunk)
            if len(chunk) < ask:  # a short read of a regular file: its end
                break
        return b"".join(parts)
    finally:
        os.close(f)


def open_dir(fd: int) -> int:
    """A readable fd of the directory behind an O_PATH fd (for scandir): its `.`, opened in
    it — the very directory, as through its /proc link, without the walk through /proc."""
    return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)


def write_file(
    root: Path, real: Path, shown: str, data: bytes, *, synced: DirSyncs | None = None
) -> None:
    """Replace `real` (a path `Policy.resolve_write` approved) atomically; its directory is
    opened and checked first, and made, one checked step at a time, if missing. ToolError when
    the path is not a file's or has moved; OSError when writing fails (a full disk).
    `synced`: see atomic.write_atomic_in."""
    directory = _writable_dir(root, real.parent, shown)
    try:
        try:
            mode = os.stat(real.name, dir_fd=directory, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        if stat.S_ISDIR(mode):
            raise ToolError(f"{shown} is a directory; write cannot replace a directory")
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # a symlink is replaced, not followed
            raise ToolError(f"{shown} is not a regular file ({kind(mode)}); refused")
        write_atomic_in(directory, real.name, data, synced=synced)
    finally:
        os.close(directory)


def writable_dir(root: Path, parent: Path, shown: str) -> int:
    """An fd of `parent` (below `root`, where a checked path's file goes), checked to be
    that very folder, made one checked step at a time if missing; ToolError if it moved."""
    return _writable_dir(root, parent, shown)


def kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


def _writable_dir(root: Path, parent: Path, shown: str) -> int:
    try:
        fd = os.open(parent, DIR_FLAGS)
    except FileNotFoundError:
        fd = _make_dirs(root, parent, shown)
    except OSError as e:
        raise _write_error(e, shown) from None
    try:
        _same_place(fd, str(parent), shown, "nothing was written")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_dirs(root: Path, parent: Path, shown: str) -> int:
    """mkdir -p of `parent` below `root`, each step made and opened in the one before it
    without following a symlink."""
    fd = os.open(root, DIR_FLAGS)
    try:
        _same_place(fd, str(root), shown, "nothing was written")
        for part in parent.relative_to(root).parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
            step = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = step
    except OSError as e:
        os.close(fd)
        raise _write_error(e, shown) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_error(e: OSError, shown: str) -> ToolError:
    if e.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink where the check saw a folder
        return ToolError(_moved(shown, "nothing was written"))
    return ToolError(f"cannot write {shown}: {e.strerror}")


def _same_place(fd: int, real: str, shown: str, outcome: str) -> None:
    try:
        where = os.readlink(link(fd))
    except OSError as e:
        raise ToolError(
            f"cannot check where {shown} is ({link(fd)}: {e.strerror}); /proc must be mounted"
        ) from None
    if where != real:
        raise ToolError(_moved(shown, outcome))


def _moved(shown: str, outcome: str) -> str:
    return (
        f"refused: {shown} changed while it was being opened (a symlink or a rename raced "
        f"the path check); {outcome}"
    )

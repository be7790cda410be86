"""Write a file so that readers, and a crash at any moment, see either the old or the new bytes."""

from __future__ import annotations

import contextlib
import os
import random
import stat
from pathlib import Path

TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace `path` by `data` via a temp file in the same directory, fsync and rename.

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


def write_atomic_in(directory: int, name: str, data: bytes | str) -> None:
    """write_atomic for `name` in an open directory (an fd): every step is relative to it, so
    once the caller has checked where the directory is, nothing can send the bytes elsewhere."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        mode: int | None = stat.S_IMODE(os.stat(name, dir_fd=directory).st_mode)
    except FileNotFoundError:
        mode = None
    # The name needs no strong randomness (O_EXCL refuses a clash): `random` makes it without
    # a system call, of which each one here hands the GIL to another job.
    tmp = f".{name}.{random.getrandbits(32):08x}.tmp"
    fd = os.open(tmp, TMP_FLAGS, 0o666, dir_fd=directory)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=directory)
        raise
    # Makes the rename itself durable; some filesystems refuse to fsync a directory.
    with contextlib.suppress(OSError):
        os.fsync(directory)

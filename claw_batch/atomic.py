"""Write a file so that readers, and a crash at any moment, see either the old or the new bytes."""

from __future__ import annotations

import contextlib
import os
import random
import stat
from pathlib import Path

TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace `path` by `data` via a temp file in the same directory, fsync and rename.

    Parent directories are created; an existing file keeps its permission bits, a new one
    gets the default permissions (0o666 minus the umask).
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        mode: int | None = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    # The name needs no strong randomness (O_EXCL refuses a clash): `random` makes it without
    # a system call, of which each one here hands the GIL to another job.
    tmp = path.with_name(f".{path.name}.{random.getrandbits(32):08x}.tmp")
    try:
        fd = os.open(tmp, TMP_FLAGS, 0o666)
    except FileNotFoundError:  # a new directory: made only when needed
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, TMP_FLAGS, 0o666)
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
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; some filesystems refuse to fsync a directory.
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)

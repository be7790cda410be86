"""The SysV shared memory segments of a sandbox's IPC namespace, and the pages they hold.

A segment outlives every process that made or attached it, until its namespace ends (with
the call): no count of the sandbox's processes finds it. The kernel lists the segments of
the IPC namespace of whoever reads /proc/sysvipc/shm, whatever /proc it is read through, so
the list is read from inside the namespace: by a thread of claw that enters it and ends,
which root may do; a runner that is not root may enter it only from the user namespace
that owns it, which a process of more than one thread may not enter, so `nsenter` enters
both for it (about 2 ms a check, against 0.2 ms for the thread).
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

LIST = "/proc/sysvipc/shm"
_NEWIPC = 0x08000000  # CLONE_NEWIPC
_NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1): the user namespace that owns a namespace


def segments(leader: int) -> dict[int, int]:
    """The segments of the IPC namespace of process `leader`, by id, with the bytes each
    holds (in memory or swapped); none when it is gone or shares claw's namespace."""
    try:
        ns = os.open(f"/proc/{leader}/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # gone
        return {}
    try:
        if os.fstat(ns).st_ino == os.stat("/proc/self/ns/ipc").st_ino:
            return {}  # not a namespace of its own: those would be the host's segments
        text = _by_thread(ns)
        if text is None:
            text = _by_nsenter(ns)
    finally:
        os.close(ns)
    return parse(text)


def parse(text: str) -> dict[int, int]:
    """/proc/sysvipc/shm's rows, by the names of its columns: `rss` and `swap`, or, from a
    kernel that has not those, `size` (at least what a segment holds)."""
    lines = text.splitlines()
    if not lines:
        return {}
    names = lines[0].split()
    held = [names.index(n) for n in ("rss", "swap") if n in names] or [names.index("size")]
    found: dict[int, int] = {}
    for line in lines[1:]:
        row = line.split()
        found[int(row[names.index("shmid")])] = sum(int(row[i]) for i in held)
    return found


@functools.cache
def device() -> int:
    """The device of the kernel's shared memory filesystem, where a mapped segment's file is
    (as a memory file's: /proc/<pid>/smaps names both by it and their inode)."""
    fd = os.memfd_create("claw-shm-device", os.MFD_CLOEXEC)
    try:
        return os.fstat(fd).st_dev
    finally:
        os.close(fd)


def _by_thread(ns: int) -> str | None:
    """The list, read by a thread that enters `ns` (an IPC namespace) and ends with it; None
    when it may not enter (it needs CAP_SYS_ADMIN in claw's user namespace)."""
    out: list[str] = []
    thread = threading.Thread(target=_enter_and_read, args=(ns, out), daemon=True)
    thread.start()
    thread.join()
    return out[0] if out else None


def _enter_and_read(ns: int, out: list[str]) -> None:
    if _libc().setns(ns, _NEWIPC) != 0:
        return
    try:
        with open(LIST) as f:
            out.append(f.read())
    except OSError:  # a kernel without SysV IPC: no segment either
        out.append("")


@functools.cache
def _libc() -> ctypes.CDLL:
    import ctypes  # only for setns (os.setns: Python 3.12)

    return ctypes.CDLL(None, use_errno=True)


def _by_nsenter(ns: int) -> str:
    """The list, read by `cat` in `ns` and in the user namespace that owns it, which the
    runner owns (bwrap made it); empty when that fails."""
    nsenter = shutil.which("nsenter")
    if nsenter is None:
        return ""
    try:
        owner = fcntl.ioctl(ns, _NS_GET_USERNS)
    except OSError:
        return ""
    argv = [nsenter, f"--user=/proc/self/fd/{owner}", f"--ipc=/proc/self/fd/{ns}"]
    argv += ["--preserve-credentials", "cat", LIST]
    try:
        done = subprocess.run(
            argv, pass_fds=(owner, ns), capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    finally:
        os.close(owner)
    return done.stdout if done.returncode == 0 else ""

"""How much memory a sandbox holds, read from outside through the sandbox's own root
(`/proc/<its PID 1>/root`), so that nothing its processes do hides from the count:

- what its processes hold: resident sizes (`statm`), and, when those pass the limit, the
  proportional sizes instead (`smaps`: pages shared after a fork count once, split among
  their holders);
- the memory files they hold open (memfds: their pages are in no process's resident size
  unless mapped, nor in RLIMIT_DATA), each counted once, however many processes hold it;
- its memory filesystems, `/tmp` and `/dev/shm` (claw_batch.sandbox.host): the bytes of their files,
  also of files deleted but still open, and `INODE_BYTES` for each of their inodes (an empty
  file takes no block, but kernel memory);
- the SysV shared memory segments of its IPC namespace, attached or not: the pages each
  holds, in memory or swapped. A segment outlives the processes that made it, until the
  namespace ends with the call. The kernel lists the segments of the namespace of whoever
  reads /proc/sysvipc/shm, not of the /proc it is in: a thread of claw enters the namespace
  to read it (as root); a runner that is not root may enter it only from the user namespace
  that owns it, which a process of more than one thread may not enter, so `nsenter` does.

A memory file, a file of those filesystems or a segment that a process has mapped is counted
once, as a file: the proportional count leaves out the mappings of what is counted as a file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from claw_batch.sandbox import sysvshm

MOUNTS = ("tmp", "dev/shm")  # the sandbox's memory filesystems, under its root
# Measured here (Linux 6.18): 200,000 empty files in a tmpfs took 203 MB of kernel slab.
INODE_BYTES = 1024
_PAGE = os.sysconf("SC_PAGE_SIZE")
_MEMFD = "/memfd:"  # how the kernel names a memfd's file, whatever name it was given


@dataclass(frozen=True)
class Files:
    """What is counted as files: memfds by (device, inode), filesystems by device, with
    their bytes."""

    memfds: dict[tuple[int, int], int]
    mounts: dict[int, int]
    segments: dict[int, int]  # SysV segments by id (a segment's inode is its id)

    def total(self) -> int:
        return sum(self.memfds.values()) + sum(self.mounts.values()) + sum(self.segments.values())

    def holds(self, major: int, minor: int, inode: int) -> bool:
        """Whether a mapping of this file is already counted as a file."""
        dev = os.makedev(major, minor)
        if dev in self.mounts or (dev, inode) in self.memfds:
            return True
        return inode in self.segments and dev == sysvshm.device()


def held(leader: int, limit: int) -> int:
    """The bytes the sandbox whose PID 1 is `leader` holds (0 while it is being made or once
    it is gone): exact (proportional) once the quick count passes `limit`."""
    root = f"/proc/{leader}/root"
    proc = f"{root}/proc"
    try:
        if os.stat(proc).st_dev == os.stat("/proc").st_dev:
            return 0  # bwrap has not yet made the sandbox's root: that is the host's /proc
        pids = [f"{proc}/{n}" for n in os.listdir(proc) if n.isdigit()]
    except OSError:  # the sandbox is gone, or not yet made
        return 0
    files = Files(_memfds(pids), _mounts(root), sysvshm.segments(leader))
    total = files.total() + sum(_resident(pid) for pid in pids)
    if total <= limit:
        return total
    return files.total() + sum(_proportional(pid, files) for pid in pids)


def _memfds(pids: Iterable[str]) -> dict[tuple[int, int], int]:
    found: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"{pid}/fd")
        except OSError:  # it exited meanwhile
            continue
        for fd in fds:
            path = f"{pid}/fd/{fd}"
            try:
                if not os.readlink(path).startswith(_MEMFD):
                    continue
                st = os.stat(path)
            except OSError:  # closed meanwhile
                continue
            found[(st.st_dev, st.st_ino)] = st.st_blocks * 512  # the pages it holds
    return found


def _mounts(root: str) -> dict[int, int]:
    used: dict[int, int] = {}
    for mount in MOUNTS:
        try:
            dev = os.stat(f"{root}/{mount}").st_dev
            st = os.statvfs(f"{root}/{mount}")
        except OSError:
            continue
        blocks = (st.f_blocks - st.f_bfree) * st.f_frsize
        used[dev] = blocks + (st.f_files - st.f_ffree) * INODE_BYTES
    return used


def _resident(pid: str) -> int:
    try:
        with open(f"{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):  # it exited meanwhile
        return 0


def _proportional(pid: str, files: Files) -> int:
    """Its proportional size, less its mappings of what `files` counts: `smaps_rollup`
    when it maps no shared memory at all, else each mapping of `smaps` (slower)."""
    rollup = _fields(f"{pid}/smaps_rollup", (b"Pss:", b"Pss_Shmem:"))
    if not rollup.get(b"Pss_Shmem:"):  # none (or a kernel that does not say: before 5.9)
        return rollup.get(b"Pss:", 0)
    total, counted = 0, False
    try:
        with open(f"{pid}/smaps", "rb") as f:
            for line in f:
                key, _, rest = line.partition(b" ")
                if not key.endswith(b":"):  # a mapping: start-end perms offset dev inode
                    fields = rest.split()
                    major, _, minor = fields[2].partition(b":")
                    counted = files.holds(int(major, 16), int(minor, 16), int(fields[3]))
                elif key == b"Pss:" and not counted:
                    total += int(rest.split()[0]) * 1024
    except (OSError, IndexError, ValueError):
        # It is exiting: what it shares goes with it, or is counted as a file (a segment
        # outlives it), or by the processes left; what it alone holds, not yet.
        return rollup.get(b"Pss:", 0) - rollup.get(b"Pss_Shmem:", 0)
    return total


def _fields(path: str, keys: tuple[bytes, ...]) -> dict[bytes, int]:
    """Those of `keys` that the file has, in bytes (the file says kB)."""
    found: dict[bytes, int] = {}
    try:
        with open(path, "rb") as f:
            for line in f:
                key, _, rest = line.partition(b" ")
                if key in keys:
                    found[key] = int(rest.split()[0]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return found

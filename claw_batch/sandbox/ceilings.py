"""What one sandboxed bash call may use of the machine's memory and disk, all its processes
together, watched while it runs (the bash tool asks every `CHECK_SECONDS`, and once more when
the command has ended).

Memory: what the sandbox holds (claw_batch.sandbox.memory): its processes' memory, the memory files
they hold open, the files of its /tmp and /dev/shm, and the SysV shared memory segments of its
IPC namespace (`sysvshm`). Each process also has RLIMIT_DATA at the same size (bubblewrap.py),
which refuses at once a single allocation past it; /tmp and /dev/shm have sizes of their own
(host.py), which refuse at once a write past them; a segment of more than 16M is refused
(setid). What no count here sees: a memory file in flight in a socket, kernel memory (pipes,
socket buffers); only a cgroup's `memory.max` would bound those, and claw makes none.

Disk: the write directories are on the real filesystem, which has no per-call quota. The
bound is the free space those filesystems lose while the call runs: past `disk` bytes, it is
stopped, and a call that passed it is reported so even when its command had already ended.
Free space is blocks and inodes: an empty file takes no block, yet a filesystem such as ext4
has a fixed number of inodes, and once they are gone nobody on the host, root included, can
make a file. So each inode the call takes counts as its share of the filesystem, the size
over the number of inodes (16K on ext4 by default), at least a block: a call can take no
larger a part of the inodes than of the bytes. Inodes in use are counted, not free ones:
on XFS the free ones shrink with the free blocks, which are counted already; btrfs has no
count (0), and takes its inodes from the blocks.
Whatever else writes there meanwhile (another job, the runner) counts too. Nothing refuses a
write at once: what stays past the bound is what the call wrote before a check saw it, at
the disk's speed for a write, and without any size for fallocate, which takes the space in
one system call (with FALLOC_FL_KEEP_SIZE, even past RLIMIT_FSIZE).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from claw_batch.sandbox import memory as sandboxmemory

CHECK_SECONDS = 0.1


@dataclass(frozen=True)
class Ceilings:
    memory: int | None = None  # bytes, all the sandbox holds (sandbox.memory)
    disk: int | None = None  # bytes of free space the filesystems of `places` may lose
    places: tuple[str, ...] = ()  # a path on each filesystem the call may write

    def start(self) -> Watch:
        """Begin watching a call that starts now."""
        free = {p: f for p in self.places if (f := _space(p)) is not None}
        return Watch(self, free)


@dataclass(frozen=True)
class Space:
    """What a filesystem has free: bytes of free blocks, and inodes in use (each counting
    as `inode_bytes`)."""

    free: int
    inodes: int
    inode_bytes: int

    def lost_since(self, start: Space) -> tuple[int, int]:
        """The free space lost since `start`, with each inode taken meanwhile counted; and
        how many inodes were taken."""
        taken = max(0, self.inodes - start.inodes)
        return start.free - self.free + taken * start.inode_bytes, taken


@dataclass
class Watch:
    ceilings: Ceilings
    free_at_start: dict[str, Space] = field(default_factory=dict)

    def over(self, leader: int | None) -> str | None:
        """Why the call must stop now (its processes are those of the PID namespace whose
        PID 1 is `leader`), or None."""
        memory = self.ceilings.memory
        if memory is not None and leader is not None:
            held = sandboxmemory.held(leader, memory)
            if held > memory:
                return (
                    f"its processes held {shown(held)} of memory, more than "
                    f"limits.memory ({shown(memory)})"
                )
        disk = self.ceilings.disk
        if disk is None:
            return None
        lost, taken, each = max(
            (_lost(p, s) for p, s in self.free_at_start.items()), default=(0, 0, 0)
        )
        if lost <= disk:
            return None
        files = f", counting {shown(each)} for each file it made ({taken})" if taken else ""
        return (
            f"the write directories' filesystem lost {shown(lost)} of free space during the "
            f"call{files}, more than limits.disk ({shown(disk)})"
        )


def _lost(path: str, at_start: Space) -> tuple[int, int, int]:
    """The free space lost on `path`'s filesystem, the inodes taken, and what each counts."""
    now = _space(path)
    if now is None:
        return 0, 0, 0
    return (*now.lost_since(at_start), at_start.inode_bytes)


def _space(path: str) -> Space | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    share = st.f_blocks * st.f_frsize // st.f_files if st.f_files else 0
    return Space(st.f_bfree * st.f_frsize, st.f_files - st.f_ffree, max(st.f_frsize, share))


def shown(size: int) -> str:
    """A size as the clawfile writes one: 512M, 2G, 1.5G."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f}".removesuffix(".0") + unit
    return f"{size} bytes"

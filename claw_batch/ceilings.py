"""What one sandboxed bash call may use of the machine's memory and disk, all its processes
together, watched while it runs (the bash tool asks every `CHECK_SECONDS`, and once more when
the command has ended).

Memory: what the sandbox holds (`sandboxmemory`): its processes' memory, the memory files
they hold open, and the files of its /tmp and /dev/shm. Each process also has RLIMIT_DATA at
the same size (sandbox.py), which refuses at once a single allocation past it; /tmp and
/dev/shm have sizes of their own (sandboxhost), which refuse at once a write past them.
What no count here sees: SysV shared memory that no process has attached any more, a memory
file in flight in a socket, kernel memory (pipes, socket buffers); only a cgroup's
`memory.max` would bound those, and claw makes none.

Disk: the write directories are on the real filesystem, which has no per-call quota. The
bound is the free space those filesystems lose while the call runs: past `disk` bytes, it is
stopped, and a call that passed it is reported so even when its command had already ended.
Whatever else writes there meanwhile (another job, the runner) counts too. Nothing refuses a
write at once: what stays past the bound is what the call wrote before a check saw it, at
the disk's speed for a write, and without any size for fallocate, which takes the space in
one system call (with FALLOC_FL_KEEP_SIZE, even past RLIMIT_FSIZE).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from claw_batch import sandboxmemory

CHECK_SECONDS = 0.1


@dataclass(frozen=True)
class Ceilings:
    memory: int | None = None  # bytes, all the sandbox holds (sandboxmemory)
    disk: int | None = None  # bytes of free space the filesystems of `places` may lose
    places: tuple[str, ...] = ()  # a path on each filesystem the call may write

    def start(self) -> Watch:
        """Begin watching a call that starts now."""
        free = {p: f for p in self.places if (f := _free(p)) is not None}
        return Watch(self, free)


@dataclass
class Watch:
    ceilings: Ceilings
    free_at_start: dict[str, int] = field(default_factory=dict)

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
        if disk is not None:
            lost = max((_lost(p, s) for p, s in self.free_at_start.items()), default=0)
            if lost > disk:
                return (
                    f"the write directories' filesystem lost {shown(lost)} of free space "
                    f"during the call, more than limits.disk ({shown(disk)})"
                )
        return None


def _lost(path: str, at_start: int) -> int:
    now = _free(path)
    return 0 if now is None else at_start - now


def _free(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bfree * st.f_frsize


def shown(size: int) -> str:
    """A size as the clawfile writes one: 512M, 2G, 1.5G."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f}".removesuffix(".0") + unit
    return f"{size} bytes"

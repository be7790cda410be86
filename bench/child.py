"""One `claw` child process timed as a user would time it: from spawn to exit, with its CPU
time and peak memory (its own and its workers', from `wait4`; and, when asked, the resident
memory of its whole process tree summed, sampled from /proc), and its stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CLAW = str(Path(sys.executable).with_name("claw"))


@dataclass(frozen=True)
class Child:
    started: float  # time.monotonic() just before the spawn (the lean server's clock)
    wall: float  # seconds from spawn to exit
    cpu: float  # user + system seconds of the child and every process it waited for
    maxrss_mb: float  # peak resident set of the child (or of its largest waited-for process)
    stderr: str
    tree_mb: float = 0.0  # peak of the process tree's resident memory summed (when sampled)

    @property
    def memory_mb(self) -> float:
        """What the run held at its peak: one process, or all of them together."""
        return max(self.maxrss_mb, self.tree_mb)


PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Bytes resident in `root` and all its descendants now (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
        todo += children.get(pid, [])
    return total


class Sampler(threading.Thread):
    """The peak of tree_rss(pid), every `every` seconds until stopped."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.peak = pid, every, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            self.peak = max(self.peak, tree_rss(self.pid))


def spawn(
    args: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    argv: Sequence[str] = (CLAW,),
    *,
    check: bool = True,
    sample: bool = False,
) -> Child:
    """Run `argv + args` in `cwd`; exits the benchmark if it fails (unless `check` is off).
    `sample`: also sample the process tree's memory (every 0.2 s: a few ms of CPU each)."""
    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            [*argv, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
        sampler = Sampler(proc.pid)
        if sample:
            sampler.start()
        # wait4, not Popen.wait: it hands back this child's own resource use (RUSAGE_BOTH:
        # the child and the processes it reaped), not the sum over all of ours.
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        sampler.stopped.set()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode("utf-8", errors="replace")
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join([*argv, *args])} failed ({proc.returncode}):\n{stderr[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return Child(started, wall, cpu, usage.ru_maxrss / 1024, stderr, sampler.peak / 2**20)

"""One `claw` child process timed as a user would time it: from spawn to exit, with its CPU
time and peak memory (its own and its workers', from `wait4`), and its stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
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


def spawn(
    args: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    argv: Sequence[str] = (CLAW,),
    *,
    check: bool = True,
) -> Child:
    """Run `argv + args` in `cwd`; exits the benchmark if it fails (unless `check` is off)."""
    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            [*argv, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
        # wait4, not Popen.wait: it hands back this child's own resource use (RUSAGE_BOTH:
        # the child and the processes it reaped), not the sum over all of ours.
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode("utf-8", errors="replace")
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join([*argv, *args])} failed ({proc.returncode}):\n{stderr[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return Child(started, wall, cpu, usage.ru_maxrss / 1024, stderr)

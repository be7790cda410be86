"""The cores this process may run on: where claw decides whether another process pays (model
calls in worker processes, the quick check of a large task in two halves)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as taskset sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1

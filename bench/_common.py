"""What the benchmarks share: the repository's paths, timing statistics, markdown tables and
a one-line description of the machine (BENCHMARKS.md wants it next to every number)."""

from __future__ import annotations

import os
import platform
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def use_repo() -> None:
    """Import claw_batch from this checkout and the fakes from tests/, installed or not."""
    for path in (str(TESTS), str(REPO)):
        if path not in sys.path:
            sys.path.insert(0, path)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def p90(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def ms(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1000:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; numbers are right-aligned by the renderer, not by us."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    return (
        f"{platform.system()} {platform.release()} {platform.machine()}, {cpu_model()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()} ({sys.executable})"
    )

"""What the benchmarks share: the repository's paths, timing statistics, markdown tables and
a one-line description of the machine (BENCHMARKS.md wants it next to every number)."""

from __future__ import annotations

import atexit
import os
import platform
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def use_repo() -> None:
    """Import claw_batch from this checkout and the fakes from tests/, installed or not."""
    for path in (str(TESTS), str(REPO)):
        if path not in sys.path:
            sys.path.insert(0, path)


_SCRATCH: list[Path] = []


@contextmanager
def scratch() -> Iterator[str]:
    """A fresh folder for one measured run's project, removed when the benchmark exits, not
    when the run ends. The project's machine keeps its files on ext4 without a journal, where
    the kernel skips inodes freed in the last 60-360 s when it makes a file (`recently_deleted`):
    right after a benchmark deleted the thousands of files of its previous project, each file
    the next run made cost up to ~1 ms of kernel CPU, charged to claw. Deleting at the end keeps
    the harness's own clean-up out of what it measures (BENCHMARKS.md, issue 17)."""
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="claw-bench-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    yield tempfile.mkdtemp(dir=_SCRATCH[0])


def example_project(root: Path) -> Path:
    """A copy of this repository's example project (clawfile, prompts, skills, workspace),
    without what its runs wrote: reports, tickets, the developer's own daily notes."""
    root.mkdir(parents=True)
    for rel in ("clawfile.yaml", "prompts", "skills", "workspace"):
        source = REPO / rel
        if source.is_dir():
            shutil.copytree(source, root / rel, ignore=shutil.ignore_patterns("reports", "tickets"))
        else:
            shutil.copy(source, root / rel)
    for note in (root / "workspace/memory").glob("*.md"):
        note.unlink()
    return root


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

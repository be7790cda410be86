"""Which jobs a `claw run` means: targets, `default:`, `needs:` order, `foreach:` fan-out."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.clawfile import Clawfile
from claw_batch.errors import ClawfileError, UsageError
from claw_batch.paths import NEVER_SEARCHED


@dataclass(frozen=True)
class Job:
    task: str
    item: str | None = None  # the fan-out file, project-relative

    @property
    def name(self) -> str:
        return f"{self.task}[{self.item}]" if self.item else self.task


def select_tasks(config: Clawfile, targets: Sequence[str]) -> list[str]:
    """Task names for the targets (names or globs), or the default set when there are none."""
    if not targets:
        if config.default is not None:
            return list(config.default)
        return [n for n, t in config.tasks.items() if not (t.schedule or t.watch or t.hook)]
    chosen: list[str] = []
    for target in targets:
        matches = [n for n in config.tasks if fnmatch.fnmatchcase(n, target)]
        if not matches:
            known = ", ".join(config.tasks)
            raise UsageError(f"unknown task '{target}' (tasks: {known})")
        chosen += [m for m in matches if m not in chosen]
    return chosen


def glob_files(root: Path, pattern: str) -> list[str]:
    """Project files matching a glob, project-relative and sorted. Like a shell, `*` does
    not match a name that starts with '.' (so half-written `.x.tmp` files never count);
    never inside .git/.claw, never outside the project (after resolving symlinks); a
    trailing `**` means every file below."""
    if pattern.startswith(("/", "~")) or ".." in Path(pattern).parts:
        raise ClawfileError(f"glob '{pattern}' leaves the project; use a path relative to it")
    wants_hidden = any(part.startswith(".") for part in Path(pattern).parts)
    real_root = root.resolve()
    found = []
    for path in root.glob(pattern + "/*" if pattern.endswith("**") else pattern):
        rel = path.relative_to(root)
        if rel.parts and rel.parts[0] in NEVER_SEARCHED:
            continue
        if not wants_hidden and any(part.startswith(".") for part in rel.parts):
            continue
        if path.is_file() and path.resolve().is_relative_to(real_root):
            found.append(rel.as_posix())
    return sorted(found)


def expand(config: Clawfile, root: Path, task: str) -> list[Job]:
    pattern = config.tasks[task].foreach
    if pattern is None:
        return [Job(task)]
    return [Job(task, item) for item in glob_files(root, pattern)]

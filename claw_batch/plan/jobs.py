"""Which jobs a `claw run` means: targets, `default:`, `needs:` order, `foreach:` fan-out."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.config import Clawfile
from claw_batch.errors import ClawfileError, UsageError
from claw_batch.lazy import Lazy
from claw_batch.safety.paths import NEVER_SEARCHED


@dataclass(frozen=True, slots=True)  # one per job: 100,000 in a large run
class Job:
    task: str
    item: str | None = None  # the fan-out file, project-relative

    @property
    def name(self) -> str:
        return f"{self.task}[{self.item}]" if self.item else self.task


def items_of(jobs: Sequence[Job]) -> Sequence[str | None]:
    """The jobs' items, without making the jobs of `Items`."""
    return jobs.items if isinstance(jobs, Items) else [job.item for job in jobs]


class Items(Lazy[Job]):
    """The jobs of a fan-out task over `items`, each made when it is read."""

    def __init__(self, task: str, items: Sequence[str]) -> None:
        super().__init__(len(items), lambda i: Job(task, items[i]))
        self.task = task
        self.items = items

    def __iter__(self) -> Iterator[Job]:
        task = self.task
        for item in self.items:
            yield Job(task, item)


def select_tasks(config: Clawfile, targets: Sequence[str]) -> list[str]:
    """Task names for the targets (names or globs), or the default set when there are none."""
    if not targets:
        if config.default is not None:
            return list(config.default)
        delegated = config.delegators  # run as sub-jobs, by the tasks that delegate to them
        return [
            n
            for n, t in config.tasks.items()
            if not (t.schedule or t.watch or t.hook or n in delegated)
        ]
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
    directory, _, name = pattern.rpartition("/")
    if not _MAGIC.search(directory) and "**" not in name:
        return _in_one_directory(root, directory, name, wants_hidden)
    inside = _Inside(root)
    found = []
    prefix = len(str(root)) + 1
    for path in root.glob(pattern + "/*" if pattern.endswith("**") else pattern):
        rel = str(path)[prefix:]
        if rel.split("/", 1)[0] in NEVER_SEARCHED:
            continue
        if not wants_hidden and ("/." in "/" + rel):
            continue
        if path.is_file() and inside(path):
            found.append(rel)
    return sorted(found)


_MAGIC = re.compile(r"[*?[]")


def _in_one_directory(root: Path, directory: str, name: str, hidden: bool) -> list[str]:
    """The common case, `inbox/*.txt`: one directory listing, names matched by one regex,
    file types from the listing itself (no stat per file but for symlinks)."""
    if directory.split("/", 1)[0] in NEVER_SEARCHED or (not directory and name in NEVER_SEARCHED):
        return []
    where = os.path.join(root, directory) if directory else str(root)
    inside = _Inside(root)
    if not inside.directory(where):
        return []
    match = re.compile(fnmatch.translate(name)).match
    prefix = f"{directory}/" if directory else ""
    found = []
    try:
        with os.scandir(where) as entries:
            for entry in entries:
                if (hidden or not entry.name.startswith(".")) and match(entry.name):
                    if entry.is_symlink():
                        if not (entry.is_file() and inside.target(entry.path)):
                            continue
                    elif not entry.is_file(follow_symlinks=False):
                        continue
                    found.append(prefix + entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(found)


class _Inside:
    """Whether a file found under the root really is inside it once symlinks are resolved;
    directories are resolved once each, not once per file."""

    def __init__(self, root: Path) -> None:
        self.real_root = os.path.realpath(root)
        self.dirs: dict[str, bool] = {}

    def __call__(self, path: Path) -> bool:
        if path.is_symlink():
            return self.target(str(path))
        return self.directory(os.path.dirname(path))

    def target(self, path: str) -> bool:
        return self._contained(os.path.realpath(path))

    def directory(self, path: str) -> bool:
        if path not in self.dirs:
            self.dirs[path] = self._contained(os.path.realpath(path))
        return self.dirs[path]

    def _contained(self, real: str) -> bool:
        return os.path.commonpath([self.real_root, real]) == self.real_root


def expand(config: Clawfile, root: Path, task: str) -> Sequence[Job]:
    """The task's jobs: one per `foreach:` match or watched file (made when read), else the
    task itself."""
    patterns = config.tasks[task].item_globs
    if not patterns:
        return [Job(task)]
    if len(patterns) == 1:
        items = glob_files(root, patterns[0])
    else:
        items = sorted({item for pattern in patterns for item in glob_files(root, pattern)})
    return Items(task, items)

"""The quick check (make's): a job whose task key, item and outputs have not changed since
it last succeeded is up to date by stat keys alone, without rendering, hashing or reading
anything. Every other job takes the full check of its fingerprint (claw_batch.plan.uptodate
decides which)."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.config import Project, Task
from claw_batch.lazy import Lazy
from claw_batch.mcp import names
from claw_batch.plan import render
from claw_batch.plan.fingerprint import Fingerprint, TaskParts, digest
from claw_batch.plan.halves import all_in_halves
from claw_batch.plan.jobs import glob_files

# Template variables whose values are the same for every run of a job with the same item
# content and shared inputs: a task reading only these may take the quick check.
STABLE_VARIABLES = frozenset({"item", "task", "inputs"})
# ... and those whose values the task key holds itself: the staged changes a pre-commit review
# reads (three git calls, no rendering), the `--files` of a hook run.
KEYED_VARIABLES = frozenset({"git", "files"})


def keyed(task: Task) -> bool:
    """Whether the task's fingerprint is a function of its key and of its item's content:
    its templates read only STABLE_VARIABLES and KEYED_VARIABLES, it has no `needs:`, and no
    MCP tools (what their servers list is part of it)."""
    if task.needs or task.always or task.variables is None:
        return False
    if any(names.is_mcp(t) for t in task.tool_names):  # its servers' tool lists count
        return False
    return task.variables <= STABLE_VARIABLES | KEYED_VARIABLES


@dataclass(frozen=True)
class TaskKey:
    """What a job's fingerprint holds besides its item, for a task that is `keyed`. A job
    that succeeds stores `seal(...)`: this key and the stat keys (mtime, size, inode) its
    item and outputs had when they were hashed. While the key and those stat keys are the
    same, the job is up to date. Anything else takes the full check."""

    value: str
    shared: Mapping[str, str | None]  # the task's own `inputs:` and their hashes

    @classmethod
    def of(
        cls,
        project: Project,
        name: str,
        parts: TaskParts,
        *,
        files: tuple[str, ...],
        hash_file: Callable[[str], str | None],
    ) -> TaskKey:
        """The key of a `keyed` task; `hash_file` hashes a project-relative path."""
        task = project.config.tasks[name]
        reads = task.variables or frozenset()
        root = project.root
        shared = sorted({p for pattern in task.inputs for p in glob_files(root, pattern)})
        hashes = {path: hash_file(path) for path in shared}
        value = digest(
            {
                "code": code_stamp(),  # tool schemas, prompt instructions: claw's own code
                "task": parts.digest,
                "prompt": project.prompt_source(name)[0],
                "system": parts.system,
                "skills": parts.skills,
                "model": parts.model,
                "tools": sorted(task.offered_tools),
                "untrusted": list(project.config.untrusted),  # what is fenced, tools withheld
                "inputs": hashes,
                "files": list(files) if "files" in reads else None,
                "git": _git_state(root) if "git" in reads else None,
            }
        )
        return cls(value, hashes)

    def quick(self, stamp: str) -> str:
        digest = self._prefix.copy()  # sha256(value NUL stamp), the value hashed once
        digest.update(stamp.encode())
        return digest.hexdigest()

    @functools.cached_property
    def _prefix(self) -> hashlib._Hash:
        return hashlib.sha256(f"{self.value}\0".encode())

    def seal(self, fp: Fingerprint, stamp: str | None, outputs: Sequence[str]) -> str | None:
        """The done row's `quick`: the quick digest, then one output path per line. None
        when the job's inputs are not the ones this key saw (a file changed in between)."""
        inputs = fp.parts["inputs"]
        if stamp is None or any(inputs.get(path) != h for path, h in self.shared.items()):
            return None
        if any("\n" in path for path in outputs):
            return None
        return "\n".join([self.quick(stamp), *outputs])

    @staticmethod
    def first_output(sealed: str) -> str | None:
        paths = sealed.split("\n", 2)
        return paths[1] if len(paths) > 1 else None

    def unchanged(
        self, sealed: str, item: str | None, stamp: Callable[[list[str]], str | None]
    ) -> bool:
        """Whether a job sealed as `sealed` is up to date; `stamp` gives files' stat keys now."""
        return self.all_unchanged([(item or "", sealed)], [item], stamp) is not None

    def all_unchanged(
        self,
        seals: Sequence[tuple[str, str | None]],
        items: Sequence[str | None],
        stamp: Callable[[list[str]], str | None],
        pair: Callable[[str, str], str | None] | None = None,
    ) -> Sequence[str | None] | None:
        """`unchanged` for jobs of this task, `seals[i]` the (item, seal) of the job of
        `items[i]` as the ledger has it: the output each one's result names (None: none;
        each read from its seal when asked), or None when one does not hold (no seal,
        another item). One loop, nothing made per job (a no-op asks it of 100,000 jobs at
        once), on two cores when there are that many (claw_batch.plan.halves)."""
        if not all_in_halves(self.holds(seals, items, stamp, pair=pair), len(seals)):
            return None
        return first_outputs(seals)

    def holds(
        self,
        seals: Sequence[tuple[str, str | None]],
        items: Sequence[str | None],
        stamp: Callable[[list[str]], str | None],
        gone: Callable[[int], bool] | None = None,
        pair: Callable[[str, str], str | None] | None = None,
    ) -> Callable[[int, int], bool]:
        """`all_unchanged`'s check of the jobs `start` to `end`. `gone(i)`: whether the job
        `i`, whose item is missing, is no job at all (its item was removed since it ran);
        without it, a missing item does not hold. `pair(item, output)`: `stamp` of the two,
        for the common job (a no-op's 100,000)."""
        prefix = self._prefix

        def holds(start: int, end: int) -> bool:
            jobs = zip(seals[start:end], items[start:end], strict=True)
            for i, ((name, sealed), item) in enumerate(jobs, start):
                if not sealed or name != (item or ""):
                    return False
                digest, newline, paths = sealed.partition("\n")
                if pair and item and paths and "\n" not in paths:
                    now = pair(item, paths)
                else:
                    outputs = paths.split("\n") if newline else []
                    now = stamp([item, *outputs] if item else outputs)
                if now is None and gone and item and stamp([item]) is None and gone(i):
                    continue
                if now is None:
                    return False
                quick = prefix.copy()  # TaskKey.quick
                quick.update(now.encode())
                if digest != quick.hexdigest():
                    return False
            return True

        return holds


def first_outputs(seals: Sequence[tuple[str, str | None]]) -> Sequence[str | None]:
    """The output each seal names, read from it when asked (TaskKey.first_output)."""
    return Lazy(len(seals), lambda i: TaskKey.first_output(seals[i][1] or ""))


def _git_state(root: Path) -> list[str]:
    """What `git.*` can show a template: the staged diff and files, and HEAD."""
    git = render.GitInfo(root)
    return [digest(git.staged_diff), digest(git.staged_files), git.head]


@functools.cache
def code_stamp() -> str:
    """Which claw this is, down to its source files (an editable install changes under the
    same version): mtime and size of every module."""
    package = Path(__file__).parent.parent  # claw_batch/
    stamps = []
    for directory, _, files in os.walk(package):
        for file in files:
            if file.endswith(".py"):
                st = os.stat(os.path.join(directory, file))
                stamps.append(f"{directory}/{file}:{st.st_mtime_ns}:{st.st_size}")
    return digest(sorted(stamps))

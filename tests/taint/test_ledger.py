"""TaintedFiles: what a listing's entries cost to check (one look at git's index for all of
them), and that the answer is the one file by file would give."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from claw_batch.safety.paths import Policy
from claw_batch.store.filehash import FileHashes
from claw_batch.taint.jobtaint import JobTaint
from claw_batch.taint.ledger import TaintedFiles
from claw_batch.taint.staged import Staged, StagedFiles
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS


class CountedStaged(StagedFiles):
    """The real StagedFiles, counting how often the index is looked at."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    def now(self, root: str) -> Staged:
        self.looks += 1
        return super().now(root)


def listed(root: Path, files: TaintedFiles, tool: str, args: dict[str, str]) -> str:
    deadline = time.monotonic() + 30
    ctx = ToolContext(
        root, Policy(root), os.environ, deadline, True, None, taint=JobTaint(files=files)
    )
    return TOOLS[tool].invoke(ctx, json.dumps(args))


@pytest.mark.parametrize(("tool", "args"), [("ls", {}), ("find", {"pattern": "*.txt"})])
def test_a_listing_looks_at_the_index_once_for_all_its_entries(
    tmp_path: Path, tool: str, args: dict[str, str]
) -> None:
    root = tmp_path / "p"
    root.mkdir()
    for n in range(6):
        (root / f"{n}.txt").write_text(f"{n}\n")
    files = TaintedFiles(None, (), FileHashes(None, root).hash, str(root))
    files.git = counted = CountedStaged()
    out = listed(root, files, tool, args)
    assert out == "\n".join(f"{n}.txt" for n in range(6))
    assert counted.looks == 1


def git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "HOME": str(root)}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def test_a_listing_with_a_staged_copy_among_its_entries_is_outside_content(
    tmp_path: Path,
) -> None:
    """The same answer as asking entry by entry: the staged copy is found after the
    entries before it, and once the person changes it, it is theirs again."""
    root = tmp_path / "p"
    root.mkdir()
    git(root, "init", "-q")
    for name in ("a.txt", "b.txt", "c.txt"):
        (root / name).write_text(f"{name}\n")
    git(root, "add", "c.txt")
    files = TaintedFiles(None, (), FileHashes(None, root).hash, str(root))
    names = ["a.txt", "b.txt", "c.txt"]
    assert files.any_outside(names) is any(files.outside(n) for n in names) is True
    assert files.any_outside(names[:2]) is False
    assert listed(root, files, "ls", {}).startswith('<untrusted-data source="."')
    (root / "c.txt").write_text("mine now\n")
    assert files.any_outside(names) is any(files.outside(n) for n in names) is False

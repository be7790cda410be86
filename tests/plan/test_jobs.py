"""glob_files: the one-directory fast path agrees with the general walk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from claw_batch.plan.jobs import glob_files


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / "inbox" / "sub").mkdir(parents=True)
    (root / ".claw").mkdir()
    (tmp_path / "outside.txt").write_text("secret")
    for name in ("a.txt", "b.txt", "c.md", ".hidden.txt", "sub/d.txt"):
        (root / "inbox" / name).write_text(name)
    (root / "inbox" / "dir.txt").mkdir()  # a directory that matches: not a file
    (root / "top.txt").write_text("x")
    (root / ".claw" / "state.txt").write_text("x")
    os.symlink(root / "inbox" / "a.txt", root / "inbox" / "link-in.txt")
    os.symlink(tmp_path / "outside.txt", root / "inbox" / "link-out.txt")
    os.symlink(root / "inbox" / "gone", root / "inbox" / "dangling.txt")
    os.symlink(tmp_path, root / "escape")
    return root


@pytest.mark.parametrize(
    ("fast", "general", "expected"),
    [
        (
            "inbox/*.txt",
            "inbo[x]/*.txt",
            ["inbox/a.txt", "inbox/b.txt", "inbox/link-in.txt"],
        ),
        ("inbox/.*.txt", "inbo[x]/.*.txt", ["inbox/.hidden.txt"]),
        ("*.txt", "[t]op.txt", ["top.txt"]),
        ("inbox/sub/*", "inbox/s[u]b/*", ["inbox/sub/d.txt"]),
        ("escape/*.txt", "escap[e]/*.txt", []),
        (".claw/*.txt", ".cla[w]/*.txt", []),
        ("missing/*.txt", "missin[g]/*.txt", []),
        ("inbox/a.txt", "inbo[x]/a.txt", ["inbox/a.txt"]),
    ],
)
def test_one_directory_matches_the_general_walk(
    tree: Path, fast: str, general: str, expected: list[str]
) -> None:
    assert glob_files(tree, fast) == expected
    assert glob_files(tree, general) == expected

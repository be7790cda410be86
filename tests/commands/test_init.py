"""`claw init` in a git repository: the project it scaffolds, and the `.gitignore` that keeps
what claw writes of its own out of the commits."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_openai import FakeOpenAI, text
from helpers import claw

from claw_batch.cli import main

NOW = "2026-11-22T23:05:00+01:00"
IGNORED = (
    "# claw's own: the ledger and transcripts, and the daily note each run appends\n"
    ".claw/\n"
    "/workspace/memory/????-??-??.md\n"
)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def init(target: Path) -> str:
    r = CliRunner().invoke(main, ["init", str(target)])
    assert r.exit_code == 0, r.stderr
    return r.stderr


def test_init_ignores_the_ledger_and_the_daily_notes(tmp_path: Path) -> None:
    said = init(tmp_path / "new")
    assert (tmp_path / "new/.gitignore").read_text() == IGNORED
    assert f"created {tmp_path / 'new/.gitignore'} (.claw/ and the daily notes)\n" in said


def test_init_adds_only_the_lines_a_gitignore_lacks(tmp_path: Path) -> None:
    target = tmp_path / "old"
    target.mkdir()
    (target / ".gitignore").write_text("*.pyc\n.claw/")
    said = init(target)
    assert (target / ".gitignore").read_text() == (
        "*.pyc\n.claw/\n"
        "# claw's own: the ledger and transcripts, and the daily note each run appends\n"
        "/workspace/memory/????-??-??.md\n"
    )
    assert f"added to {target / '.gitignore'}: /workspace/memory/????-??-??.md\n" in said
    again = init(target)
    assert ".gitignore" not in again
    assert (target / ".gitignore").read_text().count("/workspace/memory/") == 1


def test_after_a_run_git_sees_only_what_the_task_wrote(tmp_path: Path, server: FakeOpenAI) -> None:
    """A `git add -A` after `claw run` stages the report the task was asked for, not the
    runner's note nor its ledger (a review hook would read them in the next diff)."""
    root = tmp_path / "proj"
    init(root)
    git(root, "init", "-q")
    assert git(root, "status", "--porcelain", "--untracked-files=all").splitlines() == sorted(
        f"?? {p.relative_to(root).as_posix()}"
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(root).parts
    )
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": NOW}
    server.enqueue(text("# Notes\n- nothing yet"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    assert (root / "workspace/memory/2026-11-22.md").is_file()
    untracked = git(root, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert [line for line in untracked if "workspace/reports" in line or "memory/20" in line] == [
        "?? workspace/reports/2026-11-22.md"
    ]
    assert not any(".claw" in line for line in untracked)
    assert os.listdir(root / ".claw")


def test_init_through_a_file_is_a_usage_error_that_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file\n")
    target = tmp_path / "notes.txt" / "sub"
    r = CliRunner().invoke(main, ["init", str(target)])
    assert (r.exit_code, r.stdout, r.stderr) == (
        2,
        "",
        f"claw: cannot make a project in {target}: {tmp_path / 'notes.txt'} is a file, "
        "not a folder\n",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]

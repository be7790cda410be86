"""Prompt templates: StrictUndefined, helpers, fan-out items and git from the index."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from claw_batch.errors import ClawfileError
from claw_batch.render import GitInfo, Item, render


def test_variables_and_helpers(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes/a.md").write_text("alpha")
    (tmp_path / "notes/b.md").write_text("beta")
    source = (
        "{{ task }} {{ item.stem }}{{ item.suffix }} in {{ item.dir }}: {{ read(item.path) }} "
        "{{ glob('notes/*.md') | join(',') }}"
    )
    out = render(source, "p.md", {"task": "t", "item": Item.of("notes/a.md")}, root=tmp_path)
    assert out == "t a.md in notes: alpha notes/a.md,notes/b.md"


def test_undefined_variable_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ClawfileError) as e:
        render("Hi {{ todya }}", "prompts/x.md", {}, root=tmp_path)
    assert str(e.value) == "prompts/x.md: 'todya' is undefined"


def test_read_outside_the_project_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClawfileError, match=r"^prompts/x\.md: .*outside"):
        render("{{ read('../secret') }}", "prompts/x.md", {}, root=tmp_path)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_git_staged_content_comes_from_the_index(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.invalid")
    git(tmp_path, "config", "user.name", "t")
    (tmp_path / "app.py").write_text("a = 1\n")
    git(tmp_path, "add", "app.py")
    git(tmp_path, "commit", "-qm", "init")
    (tmp_path / "app.py").write_text("a = 2\n")
    git(tmp_path, "add", "app.py")
    (tmp_path / "app.py").write_text("a = 3\n")  # not staged
    info = GitInfo(tmp_path)
    assert info.staged_files == ["app.py"]
    assert "+a = 2" in info.staged_diff and "a = 3" not in info.staged_diff
    assert info.staged_diff.startswith('<untrusted-data source="git diff --cached" id="')
    assert len(info.head) == 40


def test_git_outside_a_repository_is_empty(tmp_path: Path) -> None:
    info = GitInfo(tmp_path)
    assert (info.staged_files, info.head) == ([], "")


def test_runtime_errors_in_templates_are_clawfile_errors(tmp_path: Path) -> None:
    with pytest.raises(ClawfileError, match=r"^p\.md: ZeroDivisionError: division by zero$"):
        render("{{ 1 / 0 }}", "p.md", {}, root=tmp_path)
    with pytest.raises(ClawfileError, match="leaves the project"):
        render("{{ glob('/etc/*') }}", "p.md", {}, root=tmp_path)


def test_glob_skips_hidden_and_temp_files_and_reads_trailing_globstar(tmp_path: Path) -> None:
    from claw_batch.jobs import glob_files

    for rel in ("out/a.md", "out/.a.md.1234abcd.tmp", "out/sub/b.md", ".hidden/c.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    assert glob_files(tmp_path, "out/*") == ["out/a.md"]
    assert glob_files(tmp_path, "out/**") == ["out/a.md", "out/sub/b.md"]
    assert glob_files(tmp_path, "**/*.md") == ["out/a.md", "out/sub/b.md"]
    assert glob_files(tmp_path, ".hidden/*") == [".hidden/c.md"]

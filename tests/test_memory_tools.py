from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from claw_batch.errors import ToolError
from claw_batch.paths import Policy
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    return proj.resolve()


def context(root: Path, workspace: str = "workspace") -> ToolContext:
    # No write globs at all: remember writes MEMORY.md regardless of the task's write policy.
    deadline = time.monotonic() + 60
    return ToolContext(
        root=root, policy=Policy(root), env={}, deadline=deadline, workspace=workspace
    )


def call(root: Path, name: str, **args: object) -> str:
    return TOOLS[name].invoke(context(root), json.dumps(args))


def fails(root: Path, name: str, **args: object) -> str:
    with pytest.raises(ToolError) as e:
        call(root, name, **args)
    return str(e.value)


def memory(root: Path) -> str:
    return (root / "workspace" / "MEMORY.md").read_text()


def put(root: Path, rel: str, content: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


# --- remember ------------------------------------------------------------------------------------


def test_remember_spec() -> None:
    spec = TOOLS["remember"].spec()
    assert spec.parameters["required"] == ["text"]
    assert spec.parameters["properties"]["key"]["type"] == "string"
    assert spec.parameters["properties"]["key"]["pattern"] == r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def test_remember_creates_memory_md(root: Path) -> None:
    assert call(root, "remember", text="The user prefers metric units") == "remembered the fact"
    assert memory(root) == "# Memory\n\n- The user prefers metric units\n"


def test_remember_creates_it_in_the_configured_workspace(root: Path) -> None:
    ctx = context(root, workspace="home/agent")
    assert TOOLS["remember"].invoke(ctx, '{"text": "x", "key": "k"}') == "remembered k"
    assert (root / "home/agent/MEMORY.md").read_text() == "# Memory\n\n- k: x\n"


def test_remember_appends(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\n\nFacts about the project.\n\n- one\n\n\n")
    call(root, "remember", text="two")
    call(root, "remember", text="three", key="third")
    assert memory(root) == "# Memory\n\nFacts about the project.\n\n- one\n- two\n- third: three\n"


def test_remember_after_a_paragraph_starts_a_list(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\nHand-written notes.")
    call(root, "remember", text="a fact")
    assert memory(root) == "# Memory\nHand-written notes.\n\n- a fact\n"


def test_remember_replaces_by_key_anywhere(root: Path) -> None:
    put(
        root,
        "workspace/MEMORY.md",
        "# Memory\n\n## Releases\n\n  - release-day: Friday\n- release-days: plural\n\n"
        "## People\n\n- owner: Ana\n",
    )
    done = call(root, "remember", text="Thursday", key="Release-Day")
    assert done == "remembered release-day (replaced the previous fact)"
    assert memory(root) == (
        "# Memory\n\n## Releases\n\n  - release-day: Thursday\n- release-days: plural\n\n"
        "## People\n\n- owner: Ana\n"
    )


def test_remember_matches_keys_regardless_of_case_and_bullet(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\n\n* Owner : Ana\n- x\n- owner: Bob\n")
    assert call(root, "remember", text="Eve", key="owner") == (
        "remembered owner (replaced 2 previous facts)"
    )
    assert memory(root) == "# Memory\n\n- owner: Eve\n- x\n"


def test_remember_same_key_same_text_changes_nothing(root: Path) -> None:
    path = put(root, "workspace/MEMORY.md", "# Memory\n\n- owner: Ana\n")
    os.utime(path, (1, 1))
    done = call(root, "remember", text="Ana", key="owner")
    assert done == "owner is already remembered with this text; nothing changed"
    assert path.stat().st_mtime == 1


def test_remember_suppresses_a_duplicate_fact(root: Path) -> None:
    call(root, "remember", text="Deploys happen on Fridays")
    assert call(root, "remember", text="  Deploys happen\non Fridays ") == (
        "already remembered; nothing changed"
    )
    assert memory(root) == "# Memory\n\n- Deploys happen on Fridays\n"


def test_remember_collapses_newlines(root: Path) -> None:
    call(root, "remember", text="line one\nline two\r\n\n  line three\u2028four", key="multi")
    assert memory(root) == "# Memory\n\n- multi: line one line two line three four\n"


def test_remember_invalid_key(root: Path) -> None:
    assert fails(root, "remember", text="x", key="-bad key") == (
        "invalid arguments for remember: key: String should match pattern "
        "'^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'"
    )
    assert fails(root, "remember", text="x", key="k" * 65).startswith(
        "invalid arguments for remember: key: String should match pattern"
    )
    assert not (root / "workspace").exists()


def test_remember_text_bounds(root: Path) -> None:
    assert fails(root, "remember", text="x" * 501) == (
        "text is too long (501 characters, limit 500); remember one short fact per call"
    )
    assert fails(root, "remember", text=" \n ") == "text is empty; give the fact to remember"
    assert not (root / "workspace").exists()
    call(root, "remember", text="y" * 500)
    assert memory(root) == "# Memory\n\n- " + "y" * 500 + "\n"


def test_remember_refuses_a_memory_md_outside_the_project(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.md"
    outside.write_text("# theirs\n")
    (root / "workspace").mkdir()
    (root / "workspace" / "MEMORY.md").symlink_to(outside)
    assert fails(root, "remember", text="x") == (
        f"refused: workspace/MEMORY.md resolves to {outside.resolve()}, outside the project "
        f"root {root}"
    )
    assert outside.read_text() == "# theirs\n"


def test_remember_refuses_a_workspace_outside_the_project(root: Path, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (root / "workspace").symlink_to(tmp_path / "other")
    assert fails(root, "remember", text="x").startswith("refused: workspace/MEMORY.md resolves to")
    assert list((tmp_path / "other").iterdir()) == []


def test_remember_follows_a_symlink_inside_the_project(root: Path) -> None:
    target = put(root, "notes/memory.md", "# Memory\n")
    (root / "workspace").mkdir()
    (root / "workspace" / "MEMORY.md").symlink_to(target)
    call(root, "remember", text="kept as a link")
    assert (root / "workspace" / "MEMORY.md").is_symlink()
    assert target.read_text() == "# Memory\n\n- kept as a link\n"


def test_remember_refuses_a_directory(root: Path) -> None:
    (root / "workspace" / "MEMORY.md").mkdir(parents=True)
    assert fails(root, "remember", text="x") == (
        "workspace/MEMORY.md is a directory; MEMORY.md must be a file"
    )


# --- memory_search -------------------------------------------------------------------------------


@pytest.fixture
def notes(root: Path) -> Path:
    put(
        root,
        "workspace/MEMORY.md",
        "# Memory\n\n- release-day: Friday\n- the deploy script is scripts/ship.sh\n",
    )
    put(root, "workspace/memory/2024-05-01.md", "# 2024-05-01\n\n> deploy failed on staging\n")
    put(root, "workspace/memory/2024-05-03.md", "# 2024-05-03\n\n> deploy went fine\n")
    put(root, "workspace/memory/2024-05-02.md", "# 2024-05-02\n\n> release deploy to staging ok\n")
    return root


def test_search_ranks_memory_first_then_newer_notes(notes: Path) -> None:
    assert call(notes, "memory_search", query="DEPLOY") == (
        "workspace/MEMORY.md:4: - the deploy script is scripts/ship.sh\n"
        "workspace/memory/2024-05-03.md:3: > deploy went fine\n"
        "workspace/memory/2024-05-02.md:3: > release deploy to staging ok\n"
        "workspace/memory/2024-05-01.md:3: > deploy failed on staging"
    )


def test_search_ranks_lines_with_more_words_first(notes: Path) -> None:
    assert call(notes, "memory_search", query="staging deploy release") == (
        "workspace/memory/2024-05-02.md:3: > release deploy to staging ok\n"
        "workspace/memory/2024-05-01.md:3: > deploy failed on staging\n"
        "workspace/MEMORY.md:3: - release-day: Friday\n"
        "workspace/MEMORY.md:4: - the deploy script is scripts/ship.sh\n"
        "workspace/memory/2024-05-03.md:3: > deploy went fine"
    )


def test_search_limit(notes: Path) -> None:
    assert call(notes, "memory_search", query="deploy", limit=2) == (
        "workspace/MEMORY.md:4: - the deploy script is scripts/ship.sh\n"
        "workspace/memory/2024-05-03.md:3: > deploy went fine\n"
        "[2 more matches not shown; raise limit (at most 50) or add words]"
    )
    assert fails(notes, "memory_search", query="deploy", limit=0) == (
        "invalid arguments for memory_search: limit: Input should be greater than or equal to 1"
    )
    assert fails(notes, "memory_search", query="deploy", limit=51) == (
        "invalid arguments for memory_search: limit: Input should be less than or equal to 50"
    )


def test_search_deduplicates_identical_lines(notes: Path) -> None:
    put(notes, "workspace/memory/2024-05-04.md", "# 2024-05-04\n\n> deploy went fine\n")
    put(notes, "workspace/memory/2024-05-05.md", "  - release-day: Friday\n")
    assert call(notes, "memory_search", query="fine friday") == (
        "workspace/MEMORY.md:3: - release-day: Friday\n"
        "workspace/memory/2024-05-04.md:3: > deploy went fine"
    )


def test_search_no_match(notes: Path) -> None:
    assert call(notes, "memory_search", query="  kubernetes\thelm ") == (
        "no memory matches 'kubernetes helm'"
    )


def test_search_without_any_memory(root: Path) -> None:
    assert call(root, "memory_search", query="anything") == "no memory matches 'anything'"


def test_search_only_memory_md(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\n\n- owner: Ana\n")
    assert call(root, "memory_search", query="ana") == "workspace/MEMORY.md:3: - owner: Ana"


def test_search_empty_query(notes: Path) -> None:
    assert fails(notes, "memory_search", query=" \n") == (
        "query is empty; give one or more words to look for"
    )


def test_search_takes_regex_metacharacters_literally(root: Path) -> None:
    put(
        root,
        "workspace/MEMORY.md",
        "- c++ (v2) costs $5 [sic]\n- axb\n- cxx\n- a|b\n- #tag & ~x -y\n- back\\slash\n",
    )
    assert call(root, "memory_search", query="a.b c++ $5 (v2) [sic]") == (
        "workspace/MEMORY.md:1: - c++ (v2) costs $5 [sic]"
    )
    assert call(root, "memory_search", query="a|b") == "workspace/MEMORY.md:4: - a|b"
    assert call(root, "memory_search", query="#tag") == "workspace/MEMORY.md:5: - #tag & ~x -y"
    assert call(root, "memory_search", query="&") == "workspace/MEMORY.md:5: - #tag & ~x -y"
    assert call(root, "memory_search", query="k\\s") == "workspace/MEMORY.md:6: - back\\slash"
    assert call(root, "memory_search", query=".*") == "no memory matches '.*'"


def test_search_other_notes_come_after_dated_ones(notes: Path) -> None:
    put(notes, "workspace/memory/people.md", "- Ana owns the deploy\n")
    put(notes, "workspace/memory/draft.txt", "deploy (not a note)\n")
    out = call(notes, "memory_search", query="deploy").splitlines()
    assert out[-1] == "workspace/memory/people.md:1: - Ana owns the deploy"
    assert len(out) == 5


def test_search_skips_notes_outside_the_project(root: Path, tmp_path: Path) -> None:
    put(tmp_path, "secret/2024-01-01.md", "deploy key: hunter2\n")
    (root / "workspace").mkdir()
    (root / "workspace" / "memory").symlink_to(tmp_path / "secret")
    assert call(root, "memory_search", query="deploy") == "no memory matches 'deploy'"
    (root / "workspace" / "memory").unlink()
    put(root, "workspace/MEMORY.md", "- deploy on Friday\n")
    (root / "workspace" / "memory").mkdir()
    (root / "workspace" / "memory" / "2024-01-02.md").symlink_to(tmp_path / "secret/2024-01-01.md")
    assert (
        call(root, "memory_search", query="deploy") == "workspace/MEMORY.md:1: - deploy on Friday"
    )


def test_search_finds_what_remember_wrote(root: Path) -> None:
    call(root, "remember", text="Ana prefers short summaries", key="style")
    assert call(root, "memory_search", query="summaries") == (
        "workspace/MEMORY.md:3: - style: Ana prefers short summaries"
    )

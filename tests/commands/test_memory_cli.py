"""`claw memory search`: its output, --json and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import make_project

from claw_batch.cli import main

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      summary:
        prompt: "Summarise"
"""
NOW = "2026-11-22T10:00:00+00:00"


def memory_search(root: Path, *args: str) -> Result:
    runner = CliRunner()
    return runner.invoke(main, ["memory", "search", *args, "-C", str(root)], env={"CLAW_NOW": NOW})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(
        tmp_path / "p",
        CLAWFILE,
        {
            "workspace/MEMORY.md": "# Memory\n\n- release-day: Friday\n- deploys need a ticket\n",
            "workspace/memory/2026-11-21.md": "# 2026-11-21\n\n### 09:00 deploy · ok\n> shipped\n",
            "workspace/memory/2026-11-01.md": "# 2026-11-01\n\nthe deploy failed\n",
        },
    )


def test_search_prints_the_hits_best_first(project: Path) -> None:
    r = memory_search(project, "deploy")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (
        "workspace/memory/2026-11-21.md:3 [heading] ### 09:00 deploy · ok\n"
        "workspace/MEMORY.md:4 [fact] - deploys need a ticket\n"
        "workspace/memory/2026-11-01.md:3 [text]\n"
        "  1- # 2026-11-01\n"
        "  3: the deploy failed\n"
    )


def test_search_joins_its_words_and_takes_a_limit(project: Path) -> None:
    r = memory_search(project, "release", "day", "--limit", "1")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == "workspace/MEMORY.md:3 [key] - release-day: Friday\n"
    r = memory_search(project, "deploy", "-n", "1")
    assert r.stdout == (
        "workspace/memory/2026-11-21.md:3 [heading] ### 09:00 deploy · ok\n"
        "[2 more matches not shown; raise limit or add words]\n"
    )


def test_search_json(project: Path) -> None:
    r = memory_search(project, "release day", "--json")
    assert (r.exit_code, r.stderr) == (0, "")
    assert json.loads(r.stdout) == {
        "query": "release day",
        "results": [
            {
                "path": "workspace/MEMORY.md",
                "line": 3,
                "kind": "key",
                "score": 4.0,
                "text": "- release-day: Friday",
                "context": [],
                "cut": None,
            }
        ],
        "more": 0,
        "files_searched": 3,
        "files": 3,
    }


def test_search_json_with_context(project: Path) -> None:
    r = memory_search(project, "failed", "--json")
    assert json.loads(r.stdout)["results"][0]["context"] == [
        {"line": 1, "text": "# 2026-11-01"},
        {"line": 3, "text": "the deploy failed"},
    ]


def test_search_without_a_match_exits_1(project: Path) -> None:
    r = memory_search(project, "kubernetes")
    assert (r.exit_code, r.stdout, r.stderr) == (1, "", "claw: no memory matches 'kubernetes'\n")
    r = memory_search(project, "kubernetes", "--json")
    assert r.exit_code == 1
    assert json.loads(r.stdout)["results"] == []


def test_an_empty_query_is_a_usage_error(project: Path) -> None:
    r = memory_search(project, " ")
    assert (r.exit_code, r.stdout, r.stderr) == (
        2,
        "",
        "claw: query is empty; give one or more words to look for\n",
    )
    r = memory_search(project)
    assert (r.exit_code, r.stderr) == (
        2,
        "claw: memory search: missing argument 'QUERY...'. See 'claw memory search -h'.\n",
    )


def test_a_bad_limit_is_a_usage_error(project: Path) -> None:
    r = memory_search(project, "deploy", "-n", "0")
    assert (r.exit_code, r.stderr) == (
        2,
        "claw: memory search: -n: 0 is not in the range x>=1. See 'claw memory search -h'.\n",
    )


def test_no_workspace_exits_2(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE.replace("tasks:", "workspace: home\n    tasks:"))
    r = memory_search(root, "deploy")
    assert (r.exit_code, r.stdout, r.stderr) == (
        2,
        "",
        f"claw: no workspace: {root.resolve() / 'home'} is not a directory\n",
    )


def test_an_empty_workspace_has_no_matches(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    (root / "workspace/MEMORY.md").unlink()
    r = memory_search(root, "deploy")
    assert (r.exit_code, r.stderr) == (1, "claw: no memory matches 'deploy'\n")


def test_no_clawfile_exits_2(tmp_path: Path) -> None:
    r = memory_search(tmp_path, "deploy")
    assert r.exit_code == 2
    assert r.stderr.startswith("claw: ")


def test_search_matches_words_where_they_start(tmp_path: Path) -> None:
    note = (
        "# 2026-11-21\n\n### 09:00 plan · ok\n> Decided to ship on Friday.\n\n"
        "### 10:00 triage · ok\n> The flaky CI job timed out again.\n\n"
    )
    root = make_project(tmp_path / "p", CLAWFILE, {"workspace/memory/2026-11-21.md": note})
    r = memory_search(root, "flaky CI")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (  # not "Decided", which holds "ci"
        "workspace/memory/2026-11-21.md:7 [text]\n"
        "  6- ### 10:00 triage · ok\n"
        "  7: > The flaky CI job timed out again.\n"
    )


def test_search_says_when_the_note_cut_the_result_it_quotes(tmp_path: Path) -> None:
    long = "The flaky CI job timed out " + "x" * 200
    note = (
        "# 2026-11-21\n\n"
        f"### 10:00 triage · ok\n> {long[:159]}…\n> second line\n> … (4 more lines)\n\n"
        "### 11:00 plan · ok\n> flaky tests are quarantined\n\n"
    )
    root = make_project(tmp_path / "p", CLAWFILE, {"workspace/memory/2026-11-21.md": note})
    r = memory_search(root, "flaky")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (
        "workspace/memory/2026-11-21.md:4 [text]\n"
        "  3- ### 10:00 triage · ok\n"
        f"  4: > {long[:159]}…\n"
        "  5- > second line\n"
        "  6- > … (4 more lines)\n"
        "  [cut: a daily note keeps 3 lines of 160 characters of a result; `claw log` names "
        "the run, `claw show RUN triage` shows it whole]\n"
        "workspace/memory/2026-11-21.md:9 [text]\n"
        "  8- ### 11:00 plan · ok\n"
        "  9: > flaky tests are quarantined\n"
    )

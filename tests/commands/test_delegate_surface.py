"""A task that another delegates to (issue 21 §2): run as a sub-job, not by a bare `claw run`;
named as a target it runs as any task does; `claw list` says who delegates to it."""

from __future__ import annotations

import json
from pathlib import Path

from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      review:
        description: Review the notes, one sub-job per note
        prompt: "Review the notes"
        output: review.md
        tools: [ls, delegate]
        delegate: {tasks: [review-note]}
      audit:
        description: Audit the notes
        prompt: "Audit the notes"
        output: audit.md
        tools: [ls, delegate]
        delegate: {tasks: [review-note]}
      review-note:
        description: Review one note
        prompt: "Review one note"
        tools: [read]
"""


def test_a_delegated_task_is_not_in_the_default_set_but_runs_when_named(
    tmp_path: Path,
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    planned = claw(root, "run", "-n", "--json")
    assert planned.exit_code == 0, planned.stderr
    assert [j["task"] for j in json.loads(planned.stdout)["jobs"]] == ["review", "audit"]
    with FakeOpenAI() as server:
        server.handler = lambda body: text("nothing risky")
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        named = claw(root, "run", "review-note", "--json", env=env)
        assert named.exit_code == 0, named.stderr
    jobs = json.loads(named.stdout)["jobs"]
    assert [(j["task"], j["status"]) for j in jobs] == [("review-note", "ok")]


def test_list_says_which_tasks_delegate_to_a_task(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    listed = claw(root, "list")
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout == (
        "review       never ran      Review the notes, one sub-job per note\n"
        "audit        never ran      Audit the notes\n"
        "review-note  never ran      Review one note\n"
        "                            (delegated by review, audit)\n"
    )


def test_an_explicit_default_list_is_kept(tmp_path: Path) -> None:
    clawfile = CLAWFILE.replace(
        "model: fake-model\n", "model: fake-model\n    default: [review-note]\n"
    )
    root = make_project(tmp_path / "p", clawfile)
    planned = claw(root, "run", "-n", "--json")
    assert planned.exit_code == 0, planned.stderr
    assert [j["task"] for j in json.loads(planned.stdout)["jobs"]] == ["review-note"]

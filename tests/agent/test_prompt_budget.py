"""Issue 5's prompt economy: with the example workspace, the system prompt plus the schemas of
all built-in tools stay at or under 1,000 tokens (characters / 4); `delegate`, offered only to
a task that lists it and sets `delegate:`, adds at most DELEGATE more. bench/prompt.py prints
the breakdown; this keeps a change from growing it unnoticed."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from claw_batch.agent import systemprompt as context
from claw_batch.clawfile.load import load_project
from claw_batch.llm.wire import wire_tool
from claw_batch.run import prepare
from claw_batch.skills import skill as skills
from claw_batch.tools.registry import TOOLS

REPO = Path(__file__).resolve().parents[2]
BUDGET = 1000
DELEGATE = 140  # tokens: the delegate tool's schema
TYPICAL_ROOT = "/home/user/project"  # where the example is checked out changes the count


def tokens(text: str) -> int:
    return -(-len(text) // 4)


def tool_schemas(names: tuple[str, ...] | None = None) -> int:
    names = names or tuple(n for n in TOOLS if n != "delegate")
    return sum(
        tokens(json.dumps(wire_tool(TOOLS[n].spec())["function"], separators=(",", ":")))
        for n in names
    )


def test_the_delegate_tool_costs_little() -> None:
    assert tool_schemas(("delegate",)) <= DELEGATE


@pytest.mark.parametrize("task", ["nightly-summary", "triage", "review-staged"])
def test_the_example_prompt_and_every_tool_fit_the_budget(task: str) -> None:
    project = load_project(REPO, None, cache="off")
    found = skills.discover(skills.skill_dirs(REPO, project.config.workspace))
    config = project.config.tasks[task]
    offered = skills.select(found, config.skills, prepare.tool_names(config))
    prompt = context.build_system_prompt(
        root=REPO,
        workspace=project.config.workspace,
        task=task,
        skills=offered,
        today=dt.date(2000, 1, 5),  # a Wednesday (the longest day name), with no notes
    ).text.replace(str(REPO), TYPICAL_ROOT)
    assert "## Daily notes" not in prompt  # the checkout has none: bench/prompt.py adds one
    assert tokens(prompt) + tool_schemas() <= BUDGET

"""Prefix caching (issue 18): what every job of a task sends the same comes first, so that a
provider's prefix cache serves it to the second job, and to the same job the next day.

Asserted on the requests the fake server received from real `claw run`s: the tools, then the
messages, in the order providers render them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

CLAWFILE = """
    version: 1
    model: m
    tasks:
      triage:
        foreach: "inbox/*.txt"
        prompt: "Triage `{{ item.path }}`."
        output: "tickets/{{ item.stem }}.json"
        tools: [read, grep, ls]
        skills: [rules]
        schema: {type: object, required: [title], properties: {title: {type: string}}}
"""
FILES = {
    "workspace/IDENTITY.md": "Name: Claw\n",
    "skills/rules/SKILL.md": "---\nname: rules\ndescription: How to triage.\n---\nBe strict.\n",
    "inbox/a.txt": "printer broken\n",
    "inbox/b.txt": "refund please\n",
}
STABLE = ["You are claw", "## AGENTS.md", "## SOUL.md", "## USER.md", "## IDENTITY.md", "## Skills"]
CHANGING = ["## MEMORY.md", "## Daily notes", "## Environment"]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        srv.handler = lambda body: text('{"title": "a ticket"}')
        yield srv


def run(root: Path, server: FakeOpenAI, now: str, *args: str) -> list[dict[str, Any]]:
    """The requests one `claw run` sent."""
    seen = len(server.requests)
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": now}
    r = claw(root, "run", "-j", "1", "--json", *args, env=env)
    assert r.exit_code == 0, r.stderr
    assert {j["status"] for j in json.loads(r.stdout)["jobs"]} == {"ok"}
    return server.requests[seen:]


def common(a: str, b: str) -> str:
    """The longest common prefix, character by character (what a prefix cache matches)."""
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return a[:n]


def test_two_jobs_of_a_fan_out_share_all_but_the_item(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    first, second = run(root, server, "2026-11-23T07:30:00")
    assert first["tools"] == second["tools"]  # the same schemas, in the task's order
    assert [t["function"]["name"] for t in first["tools"]] == ["read", "grep", "ls"]
    system, user = (m["content"] for m in first["messages"])
    assert second["messages"][0]["content"] == system
    # The answer's instructions, the same for every job, come before the job's own prompt:
    # the two jobs' prompts differ only from the item on (a line's reminder ends them).
    shared = common(user, second["messages"][1]["content"])
    assert shared.endswith("\n\n---\n\nTriage `inbox/")
    assert "JSON Schema" in shared
    assert user.endswith(
        "\n\n---\nYour final message: only the JSON document the JSON Schema above describes.\n"
    )
    # The system prompt, in its order: the stable part first.
    assert "## Daily notes" not in system  # no note yet: no section
    places = [system.index(header) for header in STABLE + CHANGING if header != "## Daily notes"]
    assert places == sorted(places) and places[0] == 0


def test_the_same_job_on_two_days_shares_the_stable_part(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    today = run(root, server, "2026-11-23T07:30:00")[0]
    memory = root / "workspace/MEMORY.md"  # a job's `remember` adds a fact overnight
    memory.write_text(memory.read_text() + "- printer: the old one is gone\n")
    tomorrow = run(root, server, "2026-11-24T07:30:00", "-B")[0]
    assert tomorrow["tools"] == today["tools"]
    system = today["messages"][0]["content"]
    shared = common(system, tomorrow["messages"][0]["content"])
    # Shared: the identity line, the workspace files that rarely change and the skills list;
    # what changes from day to day (a new fact, yesterday's note, the date) only after them.
    stable = system[: system.index("## MEMORY.md")]
    assert shared.startswith(stable)
    assert all(header in stable for header in STABLE)
    assert "Daily notes" in tomorrow["messages"][0]["content"]  # the day before's note
    assert not any(header in stable for header in CHANGING)

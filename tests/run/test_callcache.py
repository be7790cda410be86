"""The call cache through the CLI (llm.callcache): a job that runs again replays the turns
it paid for, `-B` replays nothing, a changed tool result makes the rest live, identical
requests are made once, nothing secret is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, error, text, tool_calls
from helpers import claw, make_project

KEY = "sk-test-0123456789abcdef0123"
NOW = "2026-11-22T23:05:00+01:00"

READS = """
    version: 1
    model: fake-model
    tasks:
      reader:
        prompt: "Read the notes."
        inputs: ["notes/*.md"]
        output: out.md
        max_steps: 20
"""
NOTES = {f"notes/{n}.md": f"note {n}\n" for n in range(8)}


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY, "CLAW_NOW": NOW}


def turns(n: int) -> Any:
    """A handler: the job reads notes/0.md ... one a turn, and answers at turn `n`."""

    def handle(body: dict[str, Any]) -> Reply:
        done = sum(m["role"] == "assistant" for m in body["messages"])
        if done + 1 >= n:
            return text(f"read {done} notes")
        return tool_calls(call("read", {"path": f"notes/{done}.md"}, id=f"c{done}"))

    return handle


def transcript_events(root: Path) -> list[dict[str, Any]]:
    newest = max((root / ".claw/runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    (path,) = newest.glob("reader*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_job_that_failed_at_turn_4_replays_3_turns_when_run_again(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", READS, NOTES)
    handle = turns(6)
    calls = 0

    def first(body: dict[str, Any]) -> Reply:
        nonlocal calls
        calls += 1
        return error(400, "bad request") if calls == 4 else handle(body)

    server.handler = first
    r = claw(root, "run", env=env)
    assert r.exit_code == 1, r.stderr
    assert len(server.requests) == 4
    server.handler = handle
    r = claw(root, "run", "--json", env=env)
    assert r.exit_code == 0, r.stderr
    assert len(server.requests) == 4 + 3  # turns 4, 5 and 6: the first three replayed
    assistant = [e for e in transcript_events(root) if e["type"] == "assistant"]
    assert [bool(e.get("replayed")) for e in assistant] == [True] * 3 + [False] * 3

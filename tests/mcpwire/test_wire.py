"""MCP tools in `claw run`: offered under SERVER__TOOL, their arguments checked, their
results fenced and tainting, the servers gone when the run ends, the fingerprint over their
entries and schemas — against a real stdio server (servers/notes.py) and the fake endpoint."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import Result, claw_process, make_project

NOTES = Path(__file__).parent / "servers" / "notes.py"
NOW = "2026-11-22T23:05:00+01:00"


def clawfile(tools: str = "[read, mcp.notes.lookup]", extra: str = "", server: str = "") -> str:
    return f"""
        version: 1
        model: fake-model
        mcp_servers:
          notes: {{command: [{sys.executable}, {NOTES}{server}]}}
          other: {{command: [{sys.executable}, {NOTES}]}}
        tasks:
          ask:
            description: Asks the notes
            prompt: "What is k?"
            output: out/answer.md
            tools: {tools}
{extra}
    """


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "CLAW_NOW": NOW,
    }


def claw(root: Path, *args: str, env: dict[str, str]) -> Result:
    """`claw` in a child process: a real stderr for the servers, real process ends."""
    done = claw_process(root, *args, env=env)
    return Result(done.returncode, done.stdout, done.stderr)


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie that init has yet to reap does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def events(root: Path) -> list[dict[str, object]]:
    (run_dir,) = sorted((root / ".claw/runs").iterdir())[-1:]
    return [json.loads(line) for line in (run_dir / "ask.jsonl").read_text().splitlines()]


def tool_results(request: dict[str, object]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]  # type: ignore[index, union-attr]


def test_a_task_is_offered_exactly_the_mcp_tools_it_names_and_calls_one(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile())
    server.enqueue(tool_calls(call("notes__lookup", {"key": "k"})), text("k is v"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    first, second = server.requests
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert set(offered) == {"read", "notes__lookup"}
    assert "notes" in offered["notes__lookup"]["description"]
    assert offered["notes__lookup"]["parameters"]["required"] == ["key"]
    (result,) = tool_results(second)
    assert "value of k" in result and "<untrusted" in result  # fenced: outside content
    shown = [e for e in events(root) if e["type"] == "tool_result"]
    assert shown[0]["server"] == "notes" and shown[0]["tool"] == "lookup"
    assert (root / ".claw/mcp/catalog.json").is_file()


def test_invalid_arguments_are_a_tool_error_the_model_sees(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile())
    server.enqueue(tool_calls(call("notes__lookup", {"kee": 1})), text("sorry"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    (result,) = tool_results(server.requests[1])
    assert result.startswith("error: invalid arguments for notes__lookup")
    assert "'key' is a required property" in result


def test_a_server_error_reply_is_the_tool_s_error_result(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile("[mcp.notes.*]"))
    server.enqueue(tool_calls(call("notes__broken", {})), text("it broke"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    (result,) = tool_results(server.requests[1])
    assert result.startswith("error: notes: broken answered with an error")


def test_no_server_process_outlives_the_run(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile("[mcp.notes.pid]"))
    server.enqueue(tool_calls(call("notes__pid", {})), text("done"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    (result,) = tool_results(server.requests[1])
    pid = int(next(line for line in result.splitlines() if line.strip().isdigit()))
    assert not alive(pid)


def test_a_pattern_that_matches_no_tool_fails_the_run_naming_what_there_is(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile("[mcp.notes.nope*]"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 2, r.stderr
    assert "tasks.ask.tools: mcp.notes.nope* matches no tool" in r.stderr
    assert "lookup, injected, broken, pid" in r.stderr
    assert not server.requests

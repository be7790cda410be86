"""End to end: provider dialects (issue 16, points 8 and 9). Local servers whose tool parser is
off put tool calls in `content` as markup; DeepSeek's thinking mode sends `reasoning_content`
that must go back with the tool calls it led to, and never into an output."""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, error, text, tool_calls
from helpers import claw, make_project

NOW = "2026-11-22T23:05:00+01:00"
NOTE = "workspace/memory/2026-11-22.md"
TASK = """
    version: 1
    model: local-qwen
    tasks:
      summary:
        prompt: Summarise notes/a.md.
        output: out.md
"""
HERMES = (
    "I will read the note first.\n"
    '<tool_call>\n{"name": "read", "arguments": {"path": "notes/a.md"}}\n</tool_call>'
)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def run(root: Path, server: FakeOpenAI) -> Any:
    env = {"OPENAI_BASE_URL": server.base_url, "CLAW_NOW": NOW}
    return claw(root, "run", "summary", env=env)


def events(root: Path) -> list[dict[str, Any]]:
    (transcript,) = (root / ".claw/runs").glob("*/summary.jsonl")
    return [json.loads(line) for line in transcript.read_text().splitlines()]


def project(tmp_path: Path, clawfile: str = TASK) -> Path:
    return make_project(tmp_path / "p", clawfile, {"notes/a.md": "Decided: ship it.\n"})


def test_hermes_tool_call_in_content_runs_the_tool(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path)
    server.enqueue(text(HERMES), text("Ship it (notes/a.md)."))
    r = run(root, server)
    assert r.exit_code == 0, r.stderr
    assert (root / "out.md").read_text() == "Ship it (notes/a.md).\n"
    # the model got the file, answering a call that reads as a native one
    assistant, result = server.requests[1]["messages"][2:]
    assert assistant == {
        "role": "assistant",
        "content": "I will read the note first.",
        "tool_calls": [
            {
                "id": "call00100",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "notes/a.md"}'},
            }
        ],
    }
    assert result["role"] == "tool" and result["tool_call_id"] == "call00100"
    assert "Decided: ship it." in result["content"]
    first = next(e for e in events(root) if e["type"] == "assistant")
    assert first["content"] == HERMES  # as the model sent it
    assert first["parsed_from_content"] == "hermes"
    assert first["tool_calls"] == [
        {"id": "call00100", "name": "read", "arguments": '{"path": "notes/a.md"}'}
    ]
    show = claw(root, "show", "last")
    assert '  read(path="notes/a.md")\n  (tool calls parsed from content: hermes)\n' in show.stdout


def test_mistral_tool_calls_in_content_run_the_tools(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path)
    markup = '[TOOL_CALLS][{"name": "read", "arguments": {"path": "notes/a.md"}}]'
    server.enqueue(text(markup), text("Ship it."))
    r = run(root, server)
    assert r.exit_code == 0, r.stderr
    assert (root / "out.md").read_text() == "Ship it.\n"
    assert "Decided: ship it." in server.requests[1]["messages"][-1]["content"]
    assert [e.get("parsed_from_content") for e in events(root) if e["type"] == "assistant"] == [
        "mistral",
        None,
    ]


def test_unreadable_markup_is_never_the_output(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path)
    broken = '<tool_call>\n{"name": "read", "arguments": {"path": "notes/a.md"\n</tool_call>'
    server.enqueue(text(broken), text(broken))
    r = run(root, server)
    assert r.exit_code == 1
    assert not (root / "out.md").exists()
    problem = "hermes tool call 1 is not JSON: Expecting ',' delimiter: line 1 column 52 (char 51)"
    assert re.fullmatch(
        r"start summary\nfailed summary \(\d+\.\d s, 30 tokens\): the model's reply was "
        rf"tool-call markup claw could not read \({re.escape(problem)}\)\n",
        r.stderr,
    ), r.stderr
    # the model was told once what was wrong
    correction = server.requests[1]["messages"][-1]
    assert correction == {
        "role": "user",
        "content": (
            f"Your reply holds tool-call markup that could not be read ({problem}). "
            "Call the tool again with valid JSON arguments, or give your final answer as "
            "plain text."
        ),
    }


def test_markup_quoted_in_a_fenced_answer_is_an_answer(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path)
    answer = (
        "Qwen models call tools like this:\n\n```\n"
        '<tool_call>\n{"name": "read", "arguments": {"path": "x"}}\n</tool_call>\n```'
    )
    server.enqueue(text(answer))
    r = run(root, server)
    assert r.exit_code == 0, r.stderr
    assert (root / "out.md").read_text() == answer + "\n"


def test_think_block_in_content_never_reaches_an_output(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path)
    server.enqueue(text("<think>\nThe user wants a summary. Secret musing.\n</think>\n\nShip it."))
    r = run(root, server)
    assert r.exit_code == 0, r.stderr
    assert (root / "out.md").read_text() == "Ship it.\n"
    assert "Secret musing" not in (root / NOTE).read_text()


DEEPSEEK = """
    version: 1
    model: deepseek/deepseek-reasoner
    providers:
      deepseek:
        base_url: {url}
        api_key_env: DS_KEY
        stream: {stream}
    tasks:
      summary:
        prompt: Summarise notes/a.md.
        output: out.md
"""
THOUGHT = "The user wants a summary; reading notes/a.md first."
SECRET_THOUGHT = "Secret chain of thought: they will never know."


def deepseek(replies: list[Reply]) -> Any:
    """A handler that refuses, as DeepSeek does, an assistant message with tool calls whose
    `reasoning_content` was not passed back."""
    queue = deque(replies)

    def handle(body: dict[str, Any]) -> Reply:
        for message in body["messages"]:
            if message.get("tool_calls") and "reasoning_content" not in message:
                return error(
                    400,
                    "The reasoning_content in the thinking mode must be passed back to the API.",
                    type="invalid_request_error",
                )
        return queue.popleft()

    return handle


@pytest.mark.parametrize("stream", [False, True])
def test_deepseek_thinking_mode_tool_loop(tmp_path: Path, server: FakeOpenAI, stream: bool) -> None:
    clawfile = DEEPSEEK.format(url=server.base_url, stream=str(stream).lower())
    root = project(tmp_path, clawfile)
    # DeepSeek-style: reasoning beside the tool call, whose arguments are a JSON object
    read = {"id": "call_ds_0", "type": "function", "function": {"name": "read"}}
    read["function"]["arguments"] = {"path": "notes/a.md"}  # type: ignore[index]
    server.handler = deepseek(
        [
            tool_calls(read, content="", reasoning=THOUGHT),
            text("Ship it.", reasoning=SECRET_THOUGHT),
        ]
    )
    r = claw(root, "run", "summary", env={"DS_KEY": "sk-ds-0123456789abcdef", "CLAW_NOW": NOW})
    assert r.exit_code == 0, r.stderr
    assert (root / "out.md").read_text() == "Ship it.\n"
    assert SECRET_THOUGHT not in (root / NOTE).read_text()
    assistant = server.requests[1]["messages"][2]
    assert assistant == {
        "role": "assistant",
        "content": None if stream else "",  # a stream's empty content is none
        "reasoning_content": THOUGHT,
        "tool_calls": [
            {
                "id": "call_ds_0",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "notes/a.md"}'},
            }
        ],
    }
    replies = [e for e in events(root) if e["type"] == "assistant"]
    assert [e["reasoning"] for e in replies] == [THOUGHT, SECRET_THOUGHT]


def test_markup_and_reasoning_record_and_replay(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path)
    markup = text(HERMES, reasoning=THOUGHT)  # a llama.cpp with --reasoning-format deepseek
    server.enqueue(markup, text("<think>Done.</think>Ship it (notes/a.md)."))
    env = {"OPENAI_BASE_URL": server.base_url, "CLAW_NOW": NOW}
    recorded = claw(root, "run", "--record", env=env)
    assert recorded.exit_code == 0, recorded.stderr
    (root / "out.md").unlink()
    offline = {"CLAW_NOW": NOW, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    replayed = claw(root, "run", "--replay", env=offline)
    assert replayed.exit_code == 0, replayed.stderr
    assert (root / "out.md").read_text() == "Ship it (notes/a.md).\n"
    recordings = json.loads((root / "cassettes/summary.json").read_text())["interactions"]
    replies = sorted(i["response"]["message"]["content"] for i in recordings)
    assert replies == ["<think>Done.</think>Ship it (notes/a.md).", HERMES]  # as sent


def test_reasoning_in_the_transcript_is_redacted(tmp_path: Path, server: FakeOpenAI) -> None:
    clawfile = DEEPSEEK.format(url=server.base_url, stream="false")
    root = project(tmp_path, clawfile)
    key = "sk-ds-0123456789abcdef"
    server.enqueue(text("Ship it.", reasoning=f"The key is {key}; I must not say it."))
    r = claw(root, "run", "summary", env={"DS_KEY": key, "CLAW_NOW": NOW})
    assert r.exit_code == 0, r.stderr
    (reply,) = [e for e in events(root) if e["type"] == "assistant"]
    assert reply["reasoning"] == "The key is [REDACTED]; I must not say it."
    assert key not in (root / NOTE).read_text() + (root / "out.md").read_text()

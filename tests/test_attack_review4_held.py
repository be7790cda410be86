"""Probes of issue 16's review that held: markup calls meet the checks native calls meet;
reasoning reaches no output, note or JSON; the report escapes what it shows; a key typed on
the command line is not recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import claw, make_project
from scripted import ScriptedLLM, calls, say

from claw_batch.agent.budget import JobBudget
from claw_batch.agent.loop import LoopSettings, ToolLoop
from claw_batch.errors import LimitExceeded
from claw_batch.llm import toolmarkup
from claw_batch.llm.messages import Message
from claw_batch.safety.paths import Policy
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS


def loop_for(root: Path, llm: ScriptedLLM, tools: tuple[str, ...], steps: int = 10) -> ToolLoop:
    deadline = time.monotonic() + 30
    ctx = ToolContext(
        root=root, policy=Policy(root, write_globs=("**",)), env={}, deadline=deadline
    )
    s = LoopSettings(model="m", temperature=None, max_steps=steps, deadline=deadline, timeout=30)
    return ToolLoop(llm, {n: TOOLS[n] for n in tools}, ctx, s, budget=JobBudget.tokens_only())


def start() -> list[Message]:
    return [Message("system", "sys"), Message("user", "go")]


def results(llm: ScriptedLLM, turn: int) -> list[str]:
    return [m.content or "" for m in llm.requests[turn].messages if m.role == "tool"]


@pytest.mark.parametrize(
    "markup",
    [
        "<tool_call><function=write><parameter=path>clawfile.yaml</parameter>"
        "<parameter=content>sandbox: none</parameter></function></tool_call>",
        '[TOOL_CALLS]write[ARGS]{"path": "prompts/../.git/config", "content": "x"}',
        '<|python_tag|>{"name": "write", "parameters": '
        '{"path": "workspace/AGENTS.md", "content": "x"}}',
        '[{"name": "write", "arguments": {"path": ".claw/state.db", "content": "x"}}]',
    ],
)
def test_markup_writes_to_control_files_are_refused(tmp_path: Path, markup: str) -> None:
    """The same call made natively gets the same answer (this harness's Policy knows
    only the fixed control paths; the e2e suites cover the project's own)."""

    (call,) = toolmarkup.recover(markup, ("read", "write"), 1).calls
    got = []
    for reply in (say(markup), calls((call.name, json.loads(call.arguments)))):
        root = tmp_path / str(len(got))
        root.mkdir()
        (root / "clawfile.yaml").write_text("version: 1\n")
        llm = ScriptedLLM(reply, say("ok"))
        assert loop_for(root, llm, ("read", "write")).run(start()).text == "ok"
        (r,) = results(llm, 1)
        got.append(
            (
                r.replace(str(root), "ROOT"),
                sorted(p.relative_to(root).as_posix() for p in root.rglob("*")),
            )
        )
    assert got[0] == got[1]
    if "AGENTS" not in markup:
        assert got[0][0].startswith("error"), got


def test_markup_and_native_repeat_limits_are_one(tmp_path: Path) -> None:
    same = '<tool_call>{"name": "ls", "arguments": {}}</tool_call>'
    llm = ScriptedLLM(say(same), say("[TOOL_CALLS]ls{}"), say('{"name": "ls", "parameters": {}}'))
    with pytest.raises(LimitExceeded, match="loop"):
        loop_for(tmp_path, llm, ("ls",)).run(start())


def test_markup_turns_count_against_max_steps(tmp_path: Path) -> None:
    llm = ScriptedLLM(*[say(f'[TOOL_CALLS]read{{"path": "x{i}"}}') for i in range(5)])
    with pytest.raises(LimitExceeded, match="max_steps"):
        loop_for(tmp_path, llm, ("read",), steps=3).run(start())


def test_an_unknown_or_odd_named_markup_tool_is_an_error_result(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        say('<tool_call>{"name": "delegate\\u001b]0;x\\u0007", "arguments": {}}</tool_call>'),
        say("ok"),
    )
    assert loop_for(tmp_path, llm, ("read",)).run(start()).text == "ok"
    (r,) = results(llm, 1)
    assert "is not available to this task" in r


def test_reasoning_reaches_no_output_note_or_json(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: local-qwen
        tasks:
          summary:
            prompt: Summarise notes/a.md.
            output: out.md
            tools: [read, remember]
        """,
        {"notes/a.md": "hi\n"},
    )
    with FakeOpenAI() as srv:
        srv.enqueue(
            text(
                '<tool_call>{"name": "read", "arguments": {"path": "notes/a.md"}}</tool_call>',
                reasoning="THOUGHT-ONE sk-abcdefghij0123456789klmnop",
            ),
            tool_calls(call("remember", {"text": "a fact"}), reasoning="THOUGHT-TWO"),
            text("<think>THOUGHT-THREE</think>The answer.", reasoning="THOUGHT-FOUR"),
        )
        r = claw(
            root,
            "run",
            "--json",
            "summary",
            env={"OPENAI_BASE_URL": srv.base_url, "CLAW_NOW": "2026-11-22T23:05:00+01:00"},
        )
        assert r.exit_code == 0, r.stderr
        sent = json.dumps(srv.requests)
    assert (root / "out.md").read_text() == "The answer.\n"
    everywhere = (
        r.stdout + r.stderr + "".join(p.read_text() for p in (root / "workspace").rglob("*.md"))
    )
    assert "THOUGHT" not in everywhere
    # sent back: exactly what came with each tool-call turn, nothing else
    assert sent.count("THOUGHT-ONE") == 2 and sent.count("THOUGHT-TWO") == 1
    assert "THOUGHT-FOUR" not in sent
    (t,) = (root / ".claw/runs").glob("*/summary.jsonl")
    assert "sk-abcdefghij0123456789klmnop" not in t.read_text()


def test_the_report_escapes_the_command_names_and_verdicts(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: local-qwen
        tasks:
          triage:
            prompt: "Triage {{ item }} {{ files }}"
            foreach: "inbox/*.txt"
            check: true
        """,
        {"inbox/<img src=x onerror=alert(1)>.txt": "hi\n"},
    )
    with FakeOpenAI() as srv:
        srv.handler = lambda body: text(
            json.dumps(
                {"ok": False, "summary": "<script>alert(2)</script>", "findings": ["<b>x</b>"]}
            )
        )
        r = claw(
            root,
            "run",
            "triage",
            "--files",
            "<script>alert(3)</script>",
            env={"OPENAI_BASE_URL": srv.base_url, "CLAW_NOW": "2026-11-22T23:05:00+01:00"},
        )
    assert r.exit_code == 1, r.stderr
    out = tmp_path / "r.html"
    rep = claw(root, "report", "-o", str(out), env={"CLAW_NOW": "2026-11-22T23:10:00+01:00"})
    assert rep.exit_code == 0, rep.stderr
    page = out.read_text()
    assert "alert(3)" in page and "onerror" in page  # shown...
    assert "<script>" not in page and "<img" not in page and "<b>x" not in page  # ...as text


@pytest.mark.parametrize(
    "arg",
    ["zq9-custom-secret-value-77", "sk-proj-abcdefghijklmnop0123456789", "https://u:pw-123456@h/x"],
)
def test_a_key_typed_on_the_command_line_is_not_recorded(tmp_path: Path, arg: str) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: local-qwen
        tasks:
          summary: {prompt: "Summarise {{ files }}.", output: out.md}
        """,
    )
    with FakeOpenAI() as srv:
        srv.enqueue(text("done"))
        env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "zq9-custom-secret-value-77"}
        claw(root, "run", "summary", "--files", arg, env=env)
    for view in (
        claw(root, "log", "--json").stdout,
        claw(root, "log").stdout,
        claw(root, "show", "last").stdout,
    ):
        assert "custom-secret" not in view and "abcdefghijklmnop" not in view
        assert "pw-123456" not in view

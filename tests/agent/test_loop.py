from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from scripted import ScriptedLLM, calls, say

from claw_batch.agent.budget import JobBudget
from claw_batch.agent.loop import LoopSettings, ToolLoop
from claw_batch.errors import LimitExceeded, TaskFailed
from claw_batch.llm.messages import Message, ToolCall
from claw_batch.safety.paths import Policy
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS


def make_loop(
    root: Path, llm: ScriptedLLM, tools: tuple[str, ...] = ("read", "ls"), **settings: object
) -> tuple[ToolLoop, list[tuple[str, dict[str, object]]]]:
    events: list[tuple[str, dict[str, object]]] = []
    deadline = time.monotonic() + float(settings.pop("timeout", 30))  # type: ignore[arg-type]
    ctx = ToolContext(
        root=root, policy=Policy(root, write_globs=("out/**",)), env={}, deadline=deadline
    )
    base = LoopSettings(model="m", temperature=None, max_steps=10, deadline=deadline, timeout=30)
    max_tokens = settings.pop("max_tokens", None)
    loop = ToolLoop(
        llm,
        {n: TOOLS[n] for n in tools},
        ctx,
        LoopSettings(**{**base.__dict__, **settings}),
        on_event=lambda kind, **f: events.append((kind, f)),
        budget=JobBudget.tokens_only(max_tokens),  # type: ignore[arg-type]
    )
    return loop, events


def start() -> list[Message]:
    return [Message("system", "sys"), Message("user", "go")]


def tool_results(llm: ScriptedLLM, turn: int) -> list[str]:
    return [m.content or "" for m in llm.requests[turn].messages if m.role == "tool"]


def test_several_calls_in_one_turn(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    llm = ScriptedLLM(calls(("read", {"path": "a.txt"}), ("ls", {})), say("done"))
    loop, _ = make_loop(tmp_path, llm)
    result = loop.run(start())
    assert result.text == "done"
    assert result.steps == 2
    assert result.usage.total_tokens == 30
    read_result, ls_result = tool_results(llm, 1)
    assert "alpha" in read_result
    assert "a.txt" in ls_result


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            ("write", {"path": "out/x.txt", "content": "x"}),
            "error: tool 'write' is not available to this task (allowed: read, ls)",
        ),
        (
            ("rm_rf", {"path": "."}),
            "error: tool 'rm_rf' is not available to this task (allowed: read, ls)",
        ),
        (("read", "{not json"), "error: invalid JSON arguments"),
        (("read", {"path": "a.txt", "offset": "many"}), "error: invalid arguments for read"),
        (("read", {"path": "a.txt", "bogus": 1}), "error: invalid arguments for read"),
        (("read", {"path": "../outside.txt"}), "error: "),
    ],
)
def test_bad_calls_go_back_as_errors_and_never_run(
    tmp_path: Path, call: tuple[str, object], expected: str
) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    llm = ScriptedLLM(calls(call), say("ok"))
    loop, events = make_loop(tmp_path, llm)
    assert loop.run(start()).text == "ok"
    (result,) = tool_results(llm, 1)
    assert result.startswith(expected), result
    assert not (tmp_path / "out").exists()
    assert [f["ok"] for k, f in events if k == "tool_result"] == [False]


def test_max_steps_is_a_limit(tmp_path: Path) -> None:
    llm = ScriptedLLM(*[calls(("ls", {"path": str(i)})) for i in range(3)])
    loop, _ = make_loop(tmp_path, llm, max_steps=3)
    with pytest.raises(LimitExceeded, match=r"^max_steps: no final answer after 3 model turns"):
        loop.run(start())


def test_timeout_is_a_limit(tmp_path: Path) -> None:
    llm = ScriptedLLM(calls(("ls", {})), say("late"))
    loop, _ = make_loop(tmp_path, llm, timeout=0)
    with pytest.raises(LimitExceeded, match=r"^timeout: the job ran longer than 30 s$"):
        loop.run(start())
    assert llm.requests == []


def test_identical_calls_in_a_row_are_a_loop(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    same = calls(("read", {"path": "a.txt"}))
    llm = ScriptedLLM(same, same, same, say("never"))
    loop, _ = make_loop(tmp_path, llm)
    with pytest.raises(LimitExceeded) as e:
        loop.run(start())
    assert str(e.value) == (
        'loop: the model made the same tool calls 3 turns in a row: read({"path":"a.txt"})'
    )
    assert len(llm.requests) == 3


def test_different_calls_are_not_a_loop(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    a, b = calls(("read", {"path": "a.txt"})), calls(("ls", {}))
    llm = ScriptedLLM(a, a, b, a, a, say("fine"))
    loop, _ = make_loop(tmp_path, llm)
    assert loop.run(start()).text == "fine"


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_final_answer_fails(tmp_path: Path, text: str) -> None:
    loop, _ = make_loop(tmp_path, ScriptedLLM(say(text)))
    with pytest.raises(TaskFailed, match=r"^the model's final answer was empty$"):
        loop.run(start())


def test_one_corrective_retry(tmp_path: Path) -> None:
    llm = ScriptedLLM(say("not json"), say('{"a": 1}'))
    loop, events = make_loop(tmp_path, llm)
    loop.check_answer = lambda text: None if text.startswith("{") else "send JSON"
    assert loop.run(start()).text == '{"a": 1}'
    assert llm.requests[1].messages[-1] == Message("user", "send JSON")
    assert ("correction", {"message": "send JSON"}) in events


def test_second_bad_answer_fails(tmp_path: Path) -> None:
    llm = ScriptedLLM(say("nope"), say("still nope"))
    loop, _ = make_loop(tmp_path, llm)
    loop.check_answer = lambda text: "send JSON"
    with pytest.raises(TaskFailed, match=r"^send JSON$"):
        loop.run(start())


def test_requests_carry_tools_and_settings(tmp_path: Path) -> None:
    llm = ScriptedLLM(say("hi"))
    loop, _ = make_loop(tmp_path, llm, model="qwen", temperature=0.2, job="t[x]")
    loop.run(start())
    (request,) = llm.requests
    assert (request.model, request.temperature, request.job) == ("qwen", 0.2, "t[x]")
    assert [t.name for t in request.tools] == ["read", "ls"]


def test_budget_stops_before_the_call_that_would_cross_it(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("word " * 2_000)
    llm = ScriptedLLM(calls(("read", {"path": "big.txt"})), say("never asked"))
    loop, _ = make_loop(tmp_path, llm, max_tokens=1_500)
    with pytest.raises(LimitExceeded, match=r"^budget: the next model call \(~\d"):
        loop.run(start())
    assert len(llm.requests) == 1  # the second call, with the 10 KB result, was never made


def test_markup_in_content_runs_as_tool_calls(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    markup = 'Reading.\n<tool_call>{"name": "read", "arguments": {"path": "a.txt"}}</tool_call>'
    llm = ScriptedLLM(say(markup), say("done"))
    loop, events = make_loop(tmp_path, llm)
    assert loop.run(start()).text == "done"
    (result,) = tool_results(llm, 1)
    assert "alpha" in result
    assistant = llm.requests[1].messages[2]
    assert assistant == Message(
        "assistant", "Reading.", (ToolCall("call00100", "read", '{"path": "a.txt"}'),)
    )
    kind, fields = events[0]
    assert (kind, fields["content"], fields["parsed_from_content"]) == (
        "assistant",
        markup,
        "hermes",
    )


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        (
            '<tool_call>{"name": "write", "arguments": {"path": "out/x", "content": "x"}}'
            "</tool_call>",
            "error: tool 'write' is not available to this task (allowed: read, ls)",
        ),
        (
            '[TOOL_CALLS][{"name": "read", "arguments": {"path": "../outside.txt"}}]',
            "error: ",
        ),
    ],
)
def test_markup_calls_get_the_checks_native_calls_get(
    tmp_path: Path, markup: str, expected: str
) -> None:
    llm = ScriptedLLM(say(markup), say("ok"))
    loop, events = make_loop(tmp_path, llm)
    assert loop.run(start()).text == "ok"
    (result,) = tool_results(llm, 1)
    assert result.startswith(expected), result
    assert not (tmp_path / "out").exists()
    assert [f["ok"] for k, f in events if k == "tool_result"] == [False]


def test_unreadable_markup_is_corrected_then_fails(tmp_path: Path) -> None:
    broken = "<tool_call>{nope}</tool_call>"
    problem = (
        "hermes tool call 1 is not JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    )
    llm = ScriptedLLM(say(broken), say(broken))
    loop, events = make_loop(tmp_path, llm)
    with pytest.raises(TaskFailed) as e:
        loop.run(start())
    assert str(e.value) == f"the model's reply was tool-call markup claw could not read ({problem})"
    assert [f["message"] for k, f in events if k == "correction"] == [
        f"Your reply holds tool-call markup that could not be read ({problem}). Call the tool "
        "again with valid JSON arguments, or give your final answer as plain text."
    ]


def test_unreadable_markup_then_an_answer(tmp_path: Path) -> None:
    llm = ScriptedLLM(say("[TOOL_CALLS] ?"), say("the answer"))
    loop, _ = make_loop(tmp_path, llm)
    assert loop.run(start()).text == "the answer"


def test_the_answer_leaves_out_thinking(tmp_path: Path) -> None:
    llm = ScriptedLLM(say("<think>secret plan</think>\n\nthe answer"))
    loop, _ = make_loop(tmp_path, llm)
    assert loop.run(start()).text == "the answer"


def test_only_thinking_is_an_empty_answer(tmp_path: Path) -> None:
    loop, _ = make_loop(tmp_path, ScriptedLLM(say("<think>cut off mid-thought")))
    with pytest.raises(TaskFailed, match=r"^the model's final answer was empty$"):
        loop.run(start())


def test_reasoning_stays_with_its_tool_calls_and_out_of_the_answer(tmp_path: Path) -> None:
    thought = calls(("ls", {}))
    thought = replace(thought, message=replace(thought.message, reasoning="I should list."))
    final = say("done")
    final = replace(final, message=replace(final.message, reasoning="secret"))
    llm = ScriptedLLM(thought, final)
    loop, events = make_loop(tmp_path, llm)
    assert loop.run(start()).text == "done"
    assert llm.requests[1].messages[2].reasoning == "I should list."
    assert [f.get("reasoning") for k, f in events if k == "assistant"] == [
        "I should list.",
        "secret",
    ]


class _Counted(Message):
    """A message that counts how often its text is read (object.__setattr__: it is frozen)."""

    def __getattribute__(self, name: str) -> object:
        if name in ("content", "tool_calls", "reasoning"):
            object.__setattr__(self, "reads", object.__getattribute__(self, "reads") + 1)
        return object.__getattribute__(self, name)


def _reads_of_the_first_messages(root: Path, turns: int) -> int:
    first = [_Counted("system", "sys"), _Counted("user", "go")]
    for m in first:
        object.__setattr__(m, "reads", 0)
    replies = [calls(("ls", {"path": f"d{n % 2}"})) for n in range(turns)]  # never 3 alike
    llm = ScriptedLLM(*replies, say("done"))
    loop, _ = make_loop(root, llm, max_steps=turns + 1)
    loop.run(list(first))
    return sum(int(object.__getattribute__(m, "reads")) for m in first)


def test_a_turn_does_not_walk_the_conversation_again(tmp_path: Path) -> None:
    """Per-turn work stays flat as the conversation grows: the loop reads each message a
    fixed number of times (the prompt estimate is kept as messages are added), whether the
    job takes 3 turns or 60. Only the model's own request, which carries them all, holds
    the old ones again."""
    for d in ("d0", "d1"):
        (tmp_path / d).mkdir()
    assert _reads_of_the_first_messages(tmp_path, 60) == _reads_of_the_first_messages(tmp_path, 3)


def test_the_budget_is_asked_with_the_whole_prompt_each_turn(tmp_path: Path) -> None:
    """The estimate kept turn by turn is the one counted over every message and tool."""
    from claw_batch.agent.loop import prompt_tokens

    (tmp_path / "a.txt").write_text("alpha " * 50)
    asked: list[int] = []

    class Recording(JobBudget):
        def reserve(self, usage: object, prompt: int) -> None:  # type: ignore[override]
            asked.append(prompt)

    llm = ScriptedLLM(calls(("read", {"path": "a.txt"})), calls(("ls", {})), say("{}"), say("ok"))
    loop, _ = make_loop(tmp_path, llm)
    loop.budget = Recording.tokens_only()
    loop.check_answer = lambda text: "not this" if text == "{}" else None
    loop.run(start())
    expected = [prompt_tokens(r.messages, loop.specs) for r in llm.requests]
    assert asked == expected
    assert asked == sorted(asked) and len(set(asked)) == 4  # it grew with every turn

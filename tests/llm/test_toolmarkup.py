"""Tool calls written into `content` by servers whose tool parser is off."""

from __future__ import annotations

import pytest

from claw_batch.llm.messages import ToolCall
from claw_batch.llm.toolmarkup import Markup, recover

OFFERED = ("read", "ls", "grep")
READ = '{"path": "notes/a.md"}'


def calls(*found: tuple[str, str], step: int = 1) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(f"call{step:03d}{n:02d}", name, a) for n, (name, a) in enumerate(found))


RECOVERED = {
    "hermes_alone": (
        '<tool_call>\n{"name": "read", "arguments": {"path": "notes/a.md"}}\n</tool_call>',
        Markup("hermes", None, calls(("read", READ))),
    ),
    "hermes_after_text_and_twice": (
        "Let me look.\n\n"
        '<tool_call>\n{"name": "read", "arguments": {"path": "notes/a.md"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>',
        Markup("hermes", "Let me look.", calls(("read", READ), ("ls", "{}"))),
    ),
    "hermes_arguments_as_text": (
        '<tool_call>{"name": "read", "arguments": "{\\"path\\": \\"notes/a.md\\"}"}</tool_call>',
        Markup("hermes", None, calls(("read", READ))),
    ),
    "hermes_after_thinking": (
        "<think>I need the note.</think>\n"
        '<tool_call>\n{"name": "read", "arguments": {"path": "notes/a.md"}}\n</tool_call>',
        Markup("hermes", "<think>I need the note.</think>", calls(("read", READ))),
    ),
    "hermes_unclosed_at_the_end": (
        '<tool_call>\n{"name": "ls", "arguments": {"path": "."}}',
        Markup("hermes", None, calls(("ls", '{"path": "."}'))),
    ),
    "hermes_unknown_tool_is_still_a_call": (
        '<tool_call>{"name": "bash", "arguments": {"command": "id"}}</tool_call>',
        Markup("hermes", None, calls(("bash", '{"command": "id"}'))),
    ),
    "qwen3_coder_xml": (
        "<tool_call>\n<function=grep>\n<parameter=pattern>\nTODO\n</parameter>\n"
        '<parameter=paths>\n["src", "docs"]\n</parameter>\n<parameter=max_results>\n5\n'
        "</parameter>\n</function>\n</tool_call>",
        Markup(
            "hermes",
            None,
            calls(("grep", '{"pattern": "TODO", "paths": ["src", "docs"], "max_results": "5"}')),
        ),
    ),
    "whole_reply_in_a_fence": (
        '```xml\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>\n```',
        Markup("hermes", None, calls(("ls", "{}"))),
    ),
    "mistral_list": (
        '[TOOL_CALLS] [{"name": "read", "arguments": {"path": "notes/a.md"}}, '
        '{"name": "ls", "arguments": {}, "id": "abcdefghi"}]',
        Markup("mistral", None, calls(("read", READ), ("ls", "{}"))),
    ),
    "mistral_name_then_arguments": (
        'Reading.\n[TOOL_CALLS]read{"path": "notes/a.md"}[TOOL_CALLS]ls[ARGS]{}',
        Markup("mistral", "Reading.", calls(("read", READ), ("ls", "{}"))),
    ),
    "llama_python_tag": (
        '<|python_tag|>{"name": "read", "parameters": {"path": "notes/a.md"}}; '
        '{"name": "ls", "parameters": {}}',
        Markup("llama", None, calls(("read", READ), ("ls", "{}"))),
    ),
    "mistral_without_its_token": (
        '[{"name": "read", "arguments": {"path": "notes/a.md"}, "id": "abcdefghi"}]',
        Markup("mistral", None, calls(("read", READ))),
    ),
    "mistral_name_a_space_then_arguments": (
        '[TOOL_CALLS]read {"path": "notes/a.md"}',
        Markup("mistral", None, calls(("read", READ))),
    ),
    "llama_bare_json_twice": (
        '{"name": "read", "parameters": {"path": "notes/a.md"}}; {"name": "ls", "parameters": {}}',
        Markup("llama", None, calls(("read", READ), ("ls", "{}"))),
    ),
    "llama_bare_json": (
        '{"type": "function", "name": "read", "parameters": {"path": "notes/a.md"}}',
        Markup("llama", None, calls(("read", READ))),
    ),
}


@pytest.mark.parametrize(("text", "expected"), RECOVERED.values(), ids=RECOVERED.keys())
def test_recovered(text: str, expected: Markup) -> None:
    assert recover(text, OFFERED, 1) == expected


def test_ids_follow_the_turn() -> None:
    found = recover('<tool_call>{"name": "ls", "arguments": {}}</tool_call>', OFFERED, 12)
    assert found is not None and found.calls == (ToolCall("call01200", "ls", "{}"),)


ANSWERS = {
    "plain": "The note says: ship it.",
    "quoted_inline": 'Qwen writes <tool_call>{"name": "ls", "arguments": {}}</tool_call> here.',
    "quoted_in_a_fence": (
        "Qwen writes this:\n\n```\n"
        '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>\n```\nThat is all.'
    ),
    "json_answer_with_a_name": '{"name": "Ada", "parameters": {"age": 36}}',
    "json_answer_naming_a_tool_with_more_keys": '{"name": "read", "parameters": {}, "ok": true}',
    "json_answer_followed_by_text": '{"name": "read", "parameters": {}} and more',
    "json_list_naming_no_tool": '[{"name": "Ada", "arguments": {}}]',
    "json_list_of_two_lists": '[{"name": "read", "arguments": {}}]; []',
    "empty_json_list": "[]",
    "json_list_with_a_stranger": (
        '[{"name": "read", "arguments": {}}, {"name": "x", "arguments": {}}]'
    ),
    "thinking_then_answer": "<think>hmm</think>\nThe answer.",
}


@pytest.mark.parametrize("text", ANSWERS.values(), ids=ANSWERS.keys())
def test_answers_stay_answers(text: str) -> None:
    assert recover(text, OFFERED, 1) is None


UNREADABLE = {
    "hermes_bad_json": (
        '<tool_call>\n{"name": "read", "arguments": {"path": "a"}\n</tool_call>',
        "hermes tool call 1 is not JSON: Expecting ',' delimiter: line 1 column 44 (char 43)",
    ),
    "hermes_no_name": (
        '<tool_call>{"arguments": {}}</tool_call>',
        'hermes tool call 1 is not an object with a name: {"arguments": {}}',
    ),
    "hermes_second_of_two": (
        '<tool_call>{"name": "ls", "arguments": {}}</tool_call>\n<tool_call>[]</tool_call>',
        "hermes tool call 2 is not an object with a name: []",
    ),
    "hermes_empty": (
        "<tool_call></tool_call>",
        "hermes tool call 1 is not JSON: Expecting value: line 1 column 1 (char 0)",
    ),
    "qwen3_coder_without_a_function": (
        "<tool_call>\n<parameter=path>\na\n</parameter>\n</tool_call>",
        "hermes tool call 1 has no name: <parameter=path>\na\n</parameter>",
    ),
    "mistral_cut_off": (
        '[TOOL_CALLS][{"name": "read", "arguments": {"pa',
        "mistral tool call 1 is not JSON: Unterminated string starting at: "
        "line 1 column 45 (char 44)",
    ),
    "mistral_without_a_name": (
        "[TOOL_CALLS] !!",
        "mistral tool call 1 has no name: !!",
    ),
    "qwen3_coder_parameter_never_closed": (
        "<tool_call>\n<function=write>\n<parameter=path>\na.md\n</parameter>\n"
        "<parameter=content>\nhalf a\n</function>\n</tool_call>",
        "hermes tool call 1 has no </parameter> after <parameter=content>",
    ),
    "qwen3_coder_function_never_closed": (
        "<tool_call>\n<function=write>\n<parameter=path>\na.md\n</parameter>\n",
        "hermes tool call 1 has no </function>: <function=write>\n<parameter=path>\na.md\n"
        "</parameter>",
    ),
    "llama_python_code": (
        '<|python_tag|>brave_search.call(query="claw")',
        "llama tool call 1 is not JSON: Expecting value: line 1 column 15 (char 14)",
    ),
}


@pytest.mark.parametrize(("text", "problem"), UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unreadable_markup_says_what_was_wrong(text: str, problem: str) -> None:
    found = recover(text, OFFERED, 1)
    assert found is not None
    assert (found.calls, found.problem) == ((), problem)


CUT_OFF = {
    "hermes": ('I look.\n<tool_call>{"name": "ls", "arguments": {}}</tool_call>', "hermes"),
    "mistral": ('I look.\n[TOOL_CALLS][{"name": "ls", "arguments": {}}]', "mistral"),
    "llama": ('I look.\n<|python_tag|>{"name": "ls", "parameters": {}}', "llama"),
    "bare": ('<think>I look.</think>\n[{"name": "ls", "arguments": {}}]', "mistral"),
}


@pytest.mark.parametrize(("text", "dialect"), CUT_OFF.values(), ids=CUT_OFF.keys())
def test_markup_in_a_reply_cut_off_by_the_token_limit_is_no_call(text: str, dialect: str) -> None:
    """finish_reason 'length': a call that looks whole may be the first of a cut-off two, and
    a Qwen3-Coder value may stop mid-line where its closing tag would have come next."""
    problem = f"{dialect} tool call cut off by the token limit"
    content = text[: text.index("\n")]
    assert recover(text, OFFERED, 1, cut_off=True) == Markup(dialect, content, problem=problem)

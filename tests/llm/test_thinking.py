"""Thinking written into `content` is left out of the answer."""

from __future__ import annotations

import pytest

from claw_batch.llm.thinking import answer, split

ANSWERS = {
    "no_thinking": ("The answer.", "The answer."),
    "a_leading_block": ("<think>\nplan\n</think>\n\nThe answer.", "The answer."),
    "after_whitespace": ("\n  <think>plan</think>The answer.", "The answer."),
    "opened_by_the_template": ("plan, more plan\n</think>\n\nThe answer.", "The answer."),
    "never_closed": ("<think>plan, cut off", ""),
    "only_the_first_block": ("<think>a</think>x <think>b</think>", "x <think>b</think>"),
    "mentioned_later": (
        "Models write <think>...</think> first.",
        "Models write <think>...</think> first.",
    ),
    "opened_by_the_template_at_the_end": ("plan only</think>", ""),
    "closing_tag_then_spaces_ends_the_line": ("plan</think>  \nThe answer.", "The answer."),
    "closing_tag_mentioned_mid_line": (
        "R1 closes thinking with </think> and then answers.",
        "R1 closes thinking with </think> and then answers.",
    ),
    "closing_tag_in_a_json_answer": (
        '{"findings": ["a.md:3: stray </think>\n"]}',
        '{"findings": ["a.md:3: stray </think>\n"]}',
    ),
    "closing_tag_in_a_pretty_json_list": ('[\n  "</think>"\n]', '[\n  "</think>"\n]'),
}


@pytest.mark.parametrize(("text", "expected"), ANSWERS.values(), ids=ANSWERS.keys())
def test_answer(text: str, expected: str) -> None:
    assert answer(text) == expected


def test_split_keeps_every_character() -> None:
    text = "<think>plan</think>\nThe answer."
    assert split(text) == ("<think>plan</think>", "\nThe answer.")


def test_with_reasoning_sent_apart_only_a_leading_block_is_thinking() -> None:
    """The server parsed the thinking out (reasoning_content): a `</think>` left in the
    content is the answer's own."""
    assert answer("plan</think>\n\nThe answer.", reasoning_apart=True) == (
        "plan</think>\n\nThe answer."
    )
    assert answer("<think>x</think>The answer.", reasoning_apart=True) == "The answer."

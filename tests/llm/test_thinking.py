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
}


@pytest.mark.parametrize(("text", "expected"), ANSWERS.values(), ids=ANSWERS.keys())
def test_answer(text: str, expected: str) -> None:
    assert answer(text) == expected


def test_split_keeps_every_character() -> None:
    text = "<think>plan</think>\nThe answer."
    assert split(text) == ("<think>plan</think>", "\nThe answer.")

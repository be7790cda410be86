"""encoded.Encoder: what a conversation's turns send, whatever they share with another."""

from __future__ import annotations

import json

import pytest

from claw_batch.llm.encoded import Encoder
from claw_batch.llm.messages import Message, ToolSpec
from claw_batch.llm.wire import wire_message, wire_tool

SYSTEM = Message("system", "You are claw.")


def whole(messages: tuple[Message, ...]) -> list[object]:
    return [wire_message(m) for m in messages]


def sent(encoder: Encoder, messages: tuple[Message, ...]) -> list[object]:
    decoded: list[object] = json.loads(b"[" + encoder.messages(messages, wire_message) + b"]")
    return decoded


@pytest.mark.parametrize("budget", [1 << 20, 10], ids=["kept", "a_budget_too_small_to_keep"])
def test_turns_of_conversations_that_share_messages_send_their_own(budget: int) -> None:
    encoder = Encoder(budget)
    first = (SYSTEM, Message("user", "a"))
    second = (SYSTEM, Message("user", "b"))  # the same system message object
    turns = [first, second, (*first, Message("assistant", "A1")), second]
    turns += [(*turns[2], Message("user", "more"), Message("assistant", "A2"))]
    turns += [(*first, Message("assistant", "another answer"))]  # a fork of the first
    turns += [(*second, Message("assistant", "B1"))]
    for messages in turns:
        assert sent(encoder, messages) == whole(messages)
    assert encoder.messages((), wire_message) == b""


def test_tools_are_encoded_as_given() -> None:
    encoder = Encoder()
    read = ToolSpec("read", "Read a file", {"type": "object"})
    ls = ToolSpec("ls", "List", {"type": "object"})
    for tools in [(read,), (read, ls), (read,)]:
        decoded = json.loads(b"[" + encoder.tools(tools, wire_tool) + b"]")
        assert decoded == [wire_tool(t) for t in tools]

"""A scripted model behind claw's own LLM Protocol, for loop and runner tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from claw_batch.llm.messages import ChatRequest, Completion, Message, ToolCall, Usage


def say(text: str, tokens: tuple[int, int] = (10, 5)) -> Completion:
    return Completion(Message("assistant", text), Usage(*tokens), "stop", "scripted")


def calls(*specs: tuple[str, Any]) -> Completion:
    """calls(("read", {"path": "a"}), ("ls", "{not json")) — a str is sent raw."""
    tool_calls = tuple(
        ToolCall(f"call_{i}", name, args if isinstance(args, str) else json.dumps(args))
        for i, (name, args) in enumerate(specs)
    )
    return Completion(
        Message("assistant", None, tool_calls), Usage(10, 5), "tool_calls", "scripted"
    )


class ScriptedLLM:
    def __init__(self, *replies: Completion | Callable[[ChatRequest], Completion]) -> None:
        self.replies = list(replies)
        self.requests: list[ChatRequest] = []

    def enqueue(self, *replies: Completion | Callable[[ChatRequest], Completion]) -> None:
        self.replies.extend(replies)

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError("the scripted model ran out of replies")
        reply = self.replies.pop(0)
        return reply(request) if callable(reply) else reply

"""The value objects that travel between the tool loop and a model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from claw_batch.llm.usage import Usage as Usage  # re-exported: the loop and the adapters use it

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON text the model sent; parsed (and maybe refused) by the loop


@dataclass(frozen=True)
class Message:
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # for role == "tool"
    # An assistant's thinking, sent as `reasoning_content` beside its content (DeepSeek's
    # thinking mode, llama.cpp, vLLM's reasoning parsers). Sent back with the tool calls it
    # led to, never part of an answer.
    reasoning: str | None = None


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool: the OpenAI `function` object."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ChatRequest:
    model: str  # the model name as the endpoint knows it (provider prefix stripped)
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    temperature: float | None = None
    # Not sent: who asks (for cassette files and error messages), and the first messages as
    # they read with placeholders for the date, time, daily notes and project location —
    # what replay keys use in their place, so that a recording replays on any day, anywhere.
    job: str = ""
    key_messages: tuple[Message, ...] = field(default=(), compare=False)
    # Not sent either: which answer to this request is wanted (the call cache's key; `-B`
    # asks for the next one, llm.callcache).
    sample: int = 0


@dataclass(frozen=True)
class Completion:
    message: Message  # role == "assistant"
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""
    replayed: bool = False  # answered from the call cache: nothing was paid for it

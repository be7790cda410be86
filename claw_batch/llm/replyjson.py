"""Messages, tool schemas and completions as JSON, and every string of a JSON value
redacted: the forms cassettes (llm.cassette) and the call cache (llm.callcache) store and
key by."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from claw_batch.llm.messages import Completion, Message, ToolCall, ToolSpec, Usage


def redacted(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` with `redact` applied to every string in it (not to dict keys)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redacted(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, redact) for v in value]
    return value


def message_json(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        data["tool_call_id"] = message.tool_call_id
    if message.reasoning is not None:  # only then: older recordings keep their keys
        data["reasoning_content"] = message.reasoning
    return data


def completion_json(completion: Completion) -> dict[str, Any]:
    usage = completion.usage
    return {
        "message": message_json(completion.message),
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": usage.cached_tokens,
        },
        "finish_reason": completion.finish_reason,
        "model": completion.model,
    }


def completion_from_json(data: dict[str, Any]) -> Completion:
    wire = data["message"]
    calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in wire.get("tool_calls", []))
    message = Message(
        wire["role"],
        wire["content"],
        calls,
        wire.get("tool_call_id"),
        wire.get("reasoning_content"),
    )
    usage = Usage(**data["usage"])
    return Completion(message, usage, data["finish_reason"], data["model"])


def tools_json(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """The tools as a request's key holds them (their parameters as plain dicts and lists)."""
    return [
        {"name": t.name, "description": t.description, "parameters": _plain(t.parameters)}
        for t in tools
    ]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value

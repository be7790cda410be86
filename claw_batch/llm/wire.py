"""The OpenAI chat-completions wire format: claw's requests out, an endpoint's replies in.

Replies are read leniently where endpoints differ harmlessly: content as a list of text
parts, tool-call arguments as a JSON value rather than its text, missing ids, content or
usage, token counts that are not integers. Any other shape raises `MalformedReply`, whose
message names the part that was wrong: `choices[0].message.tool_calls is not a list: {}`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from claw_batch.llm.encoded import Encoder, dumps
from claw_batch.llm.messages import ChatRequest, Completion, Message, ToolCall, ToolSpec, Usage

EXCERPT = 60  # characters of an odd value quoted in an error


_ENCODER = Encoder()  # shared by every endpoint of the process


class MalformedReply(Exception):
    """A reply that is not a chat completion; the adapter names the endpoint."""


def request_body(request: ChatRequest, *, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [wire_message(m) for m in request.messages],
    }
    if request.tools:
        body["tools"] = [wire_tool(t) for t in request.tools]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def request_json(request: ChatRequest, *, stream: bool = False) -> bytes:
    """`request_body` as the bytes sent: compact UTF-8, as the SDK would encode it; what an
    earlier turn of the conversation sent is not encoded again (`encoded`)."""
    parts = [b'{"model":', dumps(request.model), b',"messages":[']
    parts += [_ENCODER.messages(request.messages, wire_message), b"]"]
    if request.tools:
        parts += [b',"tools":[', _ENCODER.tools(request.tools, wire_tool), b"]"]
    if request.temperature is not None:
        parts += [b',"temperature":', dumps(request.temperature)]
    if stream:
        parts.append(b',"stream":true,"stream_options":{"include_usage":true}')
    parts.append(b"}")
    return b"".join(parts)


def wire_message(message: Message) -> dict[str, Any]:
    content = message.content
    if content is None and message.role != "assistant":
        content = ""  # only an assistant message (with tool calls) may go without content
    wire: dict[str, Any] = {"role": message.role, "content": content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_calls and message.reasoning is not None:
        # DeepSeek's thinking mode refuses (HTTP 400) a tool loop whose tool-call turns lack
        # their reasoning; without tool calls it ignores it, and deepseek-reasoner (which had
        # no tool calls) refused it: only a turn with tool calls sends it back.
        wire["reasoning_content"] = message.reasoning
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def wire_tool(tool: ToolSpec) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return {"type": "function", "function": function}


def completion_from_reply(data: object) -> Completion:
    """A whole (not streamed) reply, as decoded from its JSON."""
    reply = _object(data, "the reply", "a JSON object")
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedReply(_no_choices(reply))
    choice = _object(choices[0], "choices[0]")
    where = "choices[0].message"
    wire = _object(choice.get("message"), where)
    calls = _list(wire.get("tool_calls"), f"{where}.tool_calls")
    message = Message(
        "assistant",
        _content(wire.get("content"), f"{where}.content"),
        tuple(_tool_call(c, n, f"{where}.tool_calls[{n}]") for n, c in enumerate(calls)),
        reasoning=_reasoning(wire.get("reasoning_content")),
    )
    return Completion(message, usage_from(reply.get("usage")), _finish(choice), _model(reply))


def completion_from_chunks(chunks: Iterable[object]) -> Completion:
    """A streamed reply, from its decoded chunks."""
    stream = _Stream()
    for n, data in enumerate(chunks, 1):
        chunk = _object(data, f"stream chunk {n}")
        try:
            stream.add(chunk)
        except MalformedReply as exc:
            raise MalformedReply(f"stream chunk {n}: {exc}") from None
    if stream.chunks == 0:
        raise MalformedReply("the stream ended without a chunk")
    return stream.completion()


def usage_from(data: object) -> Usage:
    """Token counts; anything that is not one counts as 0, never as an error."""
    usage = data if isinstance(data, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), _int(cached)
    )


def excerpt(value: object) -> str:
    """A value as one short line of JSON."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
    return text if len(text) <= EXCERPT else text[:EXCERPT] + "..."


class _Stream:
    """What the chunks of a streamed reply add up to."""

    def __init__(self) -> None:
        self.chunks = 0
        self.content: list[str] = []
        self.reasoning: list[str] | None = None  # None: no chunk had `reasoning_content`
        self.calls: dict[int, dict[str, str]] = {}  # by index: id, name, arguments
        self.usage = Usage()
        self.finish: str | None = None
        self.model = ""

    def add(self, chunk: dict[str, Any]) -> None:
        self.chunks += 1
        self.model = _model(chunk) or self.model
        if chunk.get("usage") is not None:
            self.usage = usage_from(chunk["usage"])
        for n, data in enumerate(_list(chunk.get("choices"), "choices")):
            choice = _object(data, f"choices[{n}]")
            delta = choice.get("delta")
            delta = {} if delta is None else _object(delta, f"choices[{n}].delta")
            self.content.append(_content(delta.get("content"), f"choices[{n}].delta.content") or "")
            reasoning = _reasoning(delta.get("reasoning_content"))
            if reasoning is not None:
                self.reasoning = [*(self.reasoning or []), reasoning]
            where = f"choices[{n}].delta.tool_calls"
            for i, piece in enumerate(_list(delta.get("tool_calls"), where)):
                self._add_call(_object(piece, f"{where}[{i}]"), i, f"{where}[{i}]")
            self.finish = _finish(choice) or self.finish

    def _add_call(self, piece: dict[str, Any], i: int, where: str) -> None:
        index = piece.get("index")
        call = self.calls.setdefault(index if isinstance(index, int) else i, {})
        function = piece.get("function")
        function = {} if function is None else _object(function, f"{where}.function")
        if isinstance(piece.get("id"), str) and piece["id"]:
            call["id"] = piece["id"]
        name = _name(function.get("name"), f"{where}.function.name")
        if name and not call.get("name"):
            call["name"] = name
        call["arguments"] = call.get("arguments", "") + _arguments(function.get("arguments"))

    def completion(self) -> Completion:
        calls = tuple(
            ToolCall(_id(c.get("id"), n), c.get("name", ""), c.get("arguments", ""))
            for n, c in enumerate(self.calls[i] for i in sorted(self.calls))
        )
        text = "".join(self.content) or (None if calls else "")
        reasoning = None if self.reasoning is None else "".join(self.reasoning)
        message = Message("assistant", text, calls, reasoning=reasoning)
        return Completion(message, self.usage, self.finish, self.model)


def _tool_call(data: object, n: int, where: str) -> ToolCall:
    call = _object(data, where)
    function = _object(call.get("function"), f"{where}.function")
    return ToolCall(
        _id(call.get("id"), n),
        _name(function.get("name"), f"{where}.function.name"),
        _arguments(function.get("arguments")),
    )


def _content(value: object, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _wrong(where, value, "a string or a list of parts")
    texts = []
    for n, data in enumerate(value):
        part = _object(data, f"{where}[{n}]")
        if part.get("type") == "text":  # images, refusals and the like are not the answer
            text = part.get("text")
            if not isinstance(text, str):
                raise _wrong(f"{where}[{n}].text", text, "a string")
            texts.append(text)
    return "".join(texts)


def _arguments(value: object) -> str:
    # The loop parses (and maybe refuses) the text; some endpoints send the JSON value itself.
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _reasoning(value: object) -> str | None:
    # Never an error: it is not the answer, and an odd value only means there is none.
    return value if isinstance(value, str) else None


def _name(value: object, where: str) -> str:
    # An empty name is kept: the loop answers that tool '' is not available.
    if value is None or isinstance(value, str):
        return value or ""
    raise _wrong(where, value, "a string")


def _id(value: object, n: int) -> str:
    return value if isinstance(value, str) and value else f"call_{n}"


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _finish(choice: dict[str, Any]) -> str | None:
    reason = choice.get("finish_reason")
    return reason if isinstance(reason, str) else None


def _model(data: dict[str, Any]) -> str:
    model = data.get("model")
    return model if isinstance(model, str) else ""


def _no_choices(reply: dict[str, Any]) -> str:
    choices = reply.get("choices")
    if choices == []:
        return "choices is empty"
    if choices is not None:
        return str(_wrong("choices", choices, "a list"))
    error = reply.get("error")  # some proxies answer HTTP 200 with an error body
    if error is None:
        return "choices is missing"
    message = error.get("message") if isinstance(error, dict) else None
    return f"choices is missing; the reply is an error: {message or excerpt(error)}"


def _object(value: object, where: str, kind: str = "an object") -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    raise _wrong(where, value, kind)


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise _wrong(where, value, "a list")


def _wrong(where: str, value: object, kind: str) -> MalformedReply:
    if value is None:
        return MalformedReply(f"{where} is missing")
    return MalformedReply(f"{where} is not {kind}: {excerpt(value)}")

"""wire.request_json: the bytes sent, the same as encoding `request_body` whole."""

from __future__ import annotations

import json

import pytest

from claw_batch.llm import wire
from claw_batch.llm.messages import ChatRequest, Message, ToolCall, ToolSpec

READ = ToolSpec("read", "Read a file ✓", {"type": "object", "properties": {}})
TURNS = (
    Message("system", "You are claw."),
    Message("user", "Summarise a.txt — «quoted»"),
    Message("assistant", None, (ToolCall("c1", "read", '{"path": "a.txt"}'),), reasoning="Look."),
    Message("tool", "alpha\n", tool_call_id="c1"),
    Message("assistant", "It says alpha."),
)
REQUESTS = {
    "plain": ChatRequest("m", TURNS[:2]),
    "tools_and_temperature": ChatRequest("m", TURNS, (READ,), temperature=0.2),
    "integer_temperature": ChatRequest("m", TURNS, temperature=0),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("request_", REQUESTS.values(), ids=REQUESTS.keys())
def test_the_bytes_are_the_whole_body_encoded_compactly(
    request_: ChatRequest, stream: bool
) -> None:
    whole = wire.request_body(request_, stream=stream)
    expected = json.dumps(whole, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert wire.request_json(request_, stream=stream) == expected.encode()


def test_a_growing_conversation_encodes_as_it_reads_each_turn() -> None:
    """Earlier messages are the same objects from turn to turn; the bytes follow each turn."""
    for n in range(1, len(TURNS) + 1):
        request = ChatRequest("m", TURNS[:n], (READ,))
        assert json.loads(wire.request_json(request)) == wire.request_body(request)


def test_a_value_that_is_not_json_is_refused() -> None:
    with pytest.raises(ValueError):
        wire.request_json(ChatRequest("m", TURNS[:1], temperature=float("nan")))

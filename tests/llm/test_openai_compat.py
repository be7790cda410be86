from __future__ import annotations

import email.utils
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fake_openai import (
    FakeOpenAI,
    Reply,
    call,
    error,
    hang,
    raw,
    raw_stream,
    text,
    tool_calls,
    trickle,
)
from helpers import HANG, NOT_HELD_UP, since

from claw_batch import __version__
from claw_batch.errors import LimitExceeded, ModelError
from claw_batch.llm.messages import ChatRequest, Completion, Message, ToolCall, ToolSpec, Usage
from claw_batch.llm.openai_compat import TIMEOUT, OpenAICompatLLM, retry_after

READ = ToolSpec(
    "read",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
REQUEST = ChatRequest(
    model="gpt-test",
    messages=(Message("system", "You are claw."), Message("user", "Summarise a.txt")),
    tools=(READ,),
    job="summary",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    monkeypatch.delenv("OPENAI_CUSTOM_HEADERS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


class Sleeps(list[float]):
    """An injected `sleep` that records the waits instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_llm(srv: FakeOpenAI, api_key: str = "sk-test", **kw: Any) -> OpenAICompatLLM:
    return OpenAICompatLLM(base_url=srv.base_url, api_key=api_key, **kw)


def ask(llm: OpenAICompatLLM, request: ChatRequest = REQUEST, within: float = 10) -> Completion:
    return llm.complete(request, deadline=time.monotonic() + within)


def test_plain_text(srv: FakeOpenAI) -> None:
    srv.enqueue(text("Hello there.", usage=(12, 3)))
    completion = ask(make_llm(srv))
    assert completion == Completion(
        Message("assistant", "Hello there."), Usage(12, 3, 0), "stop", "gpt-test"
    )
    assert srv.headers[0]["authorization"] == "Bearer sk-test"


def test_request_in_wire_format(srv: FakeOpenAI) -> None:
    request = ChatRequest(
        model="gpt-test",
        messages=(
            Message("user", "go"),
            Message("assistant", None, (ToolCall("c1", "read", '{"path": "a.txt"}'),)),
            Message("tool", "file text", tool_call_id="c1"),
        ),
        tools=(READ,),
        temperature=0,
        job="not sent",
        key_messages=(Message("user", "not sent either"),),
    )
    srv.enqueue(text("done"))
    ask(make_llm(srv), request)
    assert srv.requests[0] == {
        "model": "gpt-test",
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path": "a.txt"}'},
                    }
                ],
            },
            {"role": "tool", "content": "file text", "tool_call_id": "c1"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "Read a file",
                    "parameters": dict(READ.parameters),
                },
            }
        ],
        "temperature": 0,
    }


def test_no_tools_and_no_temperature_are_not_sent(srv: FakeOpenAI) -> None:
    srv.enqueue(text("hi"))
    ask(make_llm(srv), ChatRequest(model="m", messages=(Message("user", "hi"),)))
    assert srv.requests[0] == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_several_tool_calls_in_one_turn(srv: FakeOpenAI) -> None:
    srv.enqueue(
        tool_calls(
            call("read", {"path": "a.txt"}, id="call_a"),
            call("grep", {"pattern": "TODO"}, id="call_b"),
            call("ls", "{not json", id="call_c"),
        )
    )
    completion = ask(make_llm(srv))
    assert completion.message.tool_calls == (
        ToolCall("call_a", "read", '{"path": "a.txt"}'),
        ToolCall("call_b", "grep", '{"pattern": "TODO"}'),
        ToolCall("call_c", "ls", "{not json"),
    )
    assert completion.message.content is None
    assert completion.finish_reason == "tool_calls"


REPLIES = {
    "text": text("A longer answer that arrives in several pieces.", usage=(40, 9), cached=32),
    "tool_calls": tool_calls(
        call("read", {"path": "workspace/notes/2024-05-01.md"}, id="call_1"),
        call("grep", {"pattern": "deadline", "ignore_case": True}, id="call_2"),
    ),
    "text_and_tool_call": tool_calls(call("ls", {}, id="call_9"), content="Let me look."),
    "reasoning_and_tool_call": tool_calls(call("ls", {}, id="call_3"), reasoning="List first."),
    "reasoning_and_text": text("Done.", reasoning="A long chain of thought, in pieces."),
}


@pytest.mark.parametrize("reply", REPLIES.values(), ids=REPLIES.keys())
def test_streaming_gives_the_same_completion(srv: FakeOpenAI, reply: Reply) -> None:
    srv.enqueue(reply, reply)
    plain = ask(make_llm(srv))
    streamed = ask(make_llm(srv, stream=True))
    assert streamed == plain
    assert srv.requests[1]["stream"] is True
    assert srv.requests[1]["stream_options"] == {"include_usage": True}
    assert "stream" not in srv.requests[0]


@pytest.mark.parametrize("stream", [False, True])
def test_usage_with_cached_tokens(srv: FakeOpenAI, stream: bool) -> None:
    srv.enqueue(text("ok", usage=(1200, 35), cached=1024))
    assert ask(make_llm(srv, stream=stream)).usage == Usage(1200, 35, 1024)


def test_tolerates_missing_content_usage_and_tool_call_ids(srv: FakeOpenAI) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"type": "function", "function": {"name": "read", "arguments": '{"path": "a"}'}},
            {"type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ],
    }
    srv.enqueue(raw({"model": "local", "choices": [{"index": 0, "message": message}]}))
    assert ask(make_llm(srv)) == Completion(
        Message(
            "assistant",
            None,
            (ToolCall("call_0", "read", '{"path": "a"}'), ToolCall("call_1", "ls", "{}")),
        ),
        Usage(),
        None,
        "local",
    )


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_content_is_kept_apart_from_the_answer(srv: FakeOpenAI, stream: bool) -> None:
    srv.enqueue(text("Ship it.", reasoning="They asked for a summary."))
    message = ask(make_llm(srv, stream=stream)).message
    assert message == Message("assistant", "Ship it.", reasoning="They asked for a summary.")


@pytest.mark.parametrize("reasoning", [None, 7, {"text": "x"}])
def test_odd_or_missing_reasoning_content_is_none(srv: FakeOpenAI, reasoning: object) -> None:
    srv.enqueue(
        raw(reply_of({"role": "assistant", "content": "hi", "reasoning_content": reasoning}))
    )
    assert ask(make_llm(srv)).message == Message("assistant", "hi")


def test_reasoning_content_goes_back_with_tool_calls_only(srv: FakeOpenAI) -> None:
    # DeepSeek's thinking mode: required on a turn with tool calls, ignored on others (and
    # refused by deepseek-reasoner, which had no tool calls)
    calling = Message("assistant", "", (ToolCall("c1", "read", "{}"),), reasoning="Read a.")
    answering = Message("assistant", "It is a.", reasoning="Done reading.")
    messages = (
        *REQUEST.messages,
        calling,
        Message("tool", "alpha", tool_call_id="c1"),
        answering,
        Message("user", "Shorter."),
    )
    srv.enqueue(text("a."))
    ask(make_llm(srv), ChatRequest(model="deepseek-chat", messages=messages))
    sent = srv.requests[0]["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ],
        "reasoning_content": "Read a.",
    }
    assert sent[4] == {"role": "assistant", "content": "It is a."}


def reply_of(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"model": "local", "choices": [choice], **extra}


def one_call(function: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": function}],
    }


def asked_for(name: str, arguments: str) -> Message:
    return Message("assistant", None, (ToolCall("c1", name, arguments),))


WHOLE = pytest.mark.parametrize("stream", [False, True], ids=["whole", "json_to_a_stream_request"])
LENIENT = {
    "arguments_as_an_object": (
        one_call({"name": "read", "arguments": {"path": "a.txt"}}),
        asked_for("read", '{"path": "a.txt"}'),
    ),
    "arguments_as_an_array": (
        one_call({"name": "read", "arguments": ["a.txt"]}),
        asked_for("read", '["a.txt"]'),
    ),
    "an_empty_tool_name": (one_call({"name": "", "arguments": "{}"}), asked_for("", "{}")),
    "content_as_parts": (
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Hello, "},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "world."},
            ],
        },
        Message("assistant", "Hello, world."),
    ),
    "no_content_at_all": ({"role": "assistant"}, Message("assistant", None)),
}


@WHOLE
@pytest.mark.parametrize(("message", "expected"), LENIENT.values(), ids=LENIENT.keys())
def test_lenient_where_endpoints_differ_harmlessly(
    srv: FakeOpenAI, message: dict[str, Any], expected: Message, stream: bool
) -> None:
    srv.enqueue(raw(reply_of(message)))
    assert ask(make_llm(srv, stream=stream)) == Completion(expected, Usage(), "stop", "local")


@WHOLE
def test_token_counts_that_are_not_integers_count_as_zero(srv: FakeOpenAI, stream: bool) -> None:
    odd = {"prompt_tokens": 12, "completion_tokens": "3", "prompt_tokens_details": "none"}
    srv.enqueue(
        raw(reply_of({"role": "assistant", "content": "a"}, usage=odd)),
        raw(reply_of({"role": "assistant", "content": "b"}, usage=[1, 2])),
        raw(reply_of({"role": "assistant", "content": "c"}, usage={"prompt_tokens": 1.5})),
    )
    llm = make_llm(srv, stream=stream)
    assert [ask(llm).usage for _ in range(3)] == [Usage(12, 0, 0), Usage(), Usage()]


def chunk(delta: object, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"model": "local", "choices": [choice], **extra}


def test_lenient_streamed_chunks(srv: FakeOpenAI) -> None:
    srv.enqueue(
        raw_stream(
            chunk({"role": "assistant", "content": [{"type": "text", "text": "Let me look."}]}),
            chunk(None),
            chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "read"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": {"path": "a.txt"}}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"name": "", "arguments": None}}]}),
            chunk({}, "tool_calls"),
            {
                "model": "local",
                "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": "5"},
            },
        )
    )
    calls = (ToolCall("c1", "read", '{"path": "a.txt"}'), ToolCall("call_1", "", ""))
    assert ask(make_llm(srv, stream=True)) == Completion(
        Message("assistant", "Let me look.", calls), Usage(9, 0, 0), "tool_calls", "local"
    )


def with_message(**fields: object) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", **fields}}]}


MALFORMED = {
    "choices_missing": ({"id": "chatcmpl-1"}, "choices is missing"),
    "choices_null": ({"choices": None}, "choices is missing"),
    "choices_empty": ({"choices": []}, "choices is empty"),
    "choices_not_a_list": ({"choices": {"0": {}}}, 'choices is not a list: {"0": {}}'),
    "choice_not_an_object": ({"choices": ["hi"]}, 'choices[0] is not an object: "hi"'),
    "message_missing": ({"choices": [{"index": 0}]}, "choices[0].message is missing"),
    "message_not_an_object": (
        {"choices": [{"message": "hi"}]},
        'choices[0].message is not an object: "hi"',
    ),
    "tool_calls_not_a_list": (
        with_message(tool_calls={"name": "read"}),
        'choices[0].message.tool_calls is not a list: {"name": "read"}',
    ),
    "tool_call_not_an_object": (
        with_message(tool_calls=["read"]),
        'choices[0].message.tool_calls[0] is not an object: "read"',
    ),
    "function_missing": (
        with_message(tool_calls=[{"id": "c1"}]),
        "choices[0].message.tool_calls[0].function is missing",
    ),
    "name_not_a_string": (
        with_message(tool_calls=[{"function": {"name": 7, "arguments": "{}"}}]),
        "choices[0].message.tool_calls[0].function.name is not a string: 7",
    ),
    "content_neither_text_nor_parts": (
        with_message(content={"text": "hi"}),
        'choices[0].message.content is not a string or a list of parts: {"text": "hi"}',
    ),
    "a_part_without_text": (
        with_message(content=[{"type": "text"}]),
        "choices[0].message.content[0].text is missing",
    ),
    "a_list": ([{"choices": []}], 'the reply is not a JSON object: [{"choices": []}]'),
    "a_string": ("hello", 'the reply is not a JSON object: "hello"'),
    "a_long_one": (
        ["x" * 100],
        'the reply is not a JSON object: ["' + "x" * 58 + "...",
    ),
    "an_error_with_status_200": (
        {"error": {"message": "upstream overloaded", "code": 502}},
        "choices is missing; the reply is an error: upstream overloaded",
    ),
    "not_json": (b'{"choices": [', 'not JSON: "{\\"choices\\": ["'),
}


@WHOLE
@pytest.mark.parametrize(("body", "what"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_reply_is_a_model_error(
    srv: FakeOpenAI, body: object, what: str, stream: bool
) -> None:
    srv.enqueue(raw(body))
    with pytest.raises(ModelError) as exc:
        ask(make_llm(srv, stream=stream, sleep=Sleeps()))
    assert str(exc.value) == f"model 'gpt-test' at {srv.base_url}: malformed reply: {what}"
    assert len(srv.requests) == 1  # not retried: the same endpoint would answer the same


FIRST = chunk({"role": "assistant", "content": "Hi"})
MALFORMED_STREAMS = {
    "a_chunk_not_an_object": ((FIRST, [1, 2]), "stream chunk 2 is not an object: [1, 2]"),
    "choices_not_a_list": (({"choices": "x"},), 'stream chunk 1: choices is not a list: "x"'),
    "delta_not_an_object": (
        (chunk("Hi"),),
        'stream chunk 1: choices[0].delta is not an object: "Hi"',
    ),
    "tool_calls_not_a_list": (
        (FIRST, chunk({"tool_calls": {"index": 0}})),
        'stream chunk 2: choices[0].delta.tool_calls is not a list: {"index": 0}',
    ),
    "function_not_an_object": (
        (chunk({"tool_calls": [{"index": 0, "function": "read"}]}),),
        'stream chunk 1: choices[0].delta.tool_calls[0].function is not an object: "read"',
    ),
    "a_chunk_not_json": ((FIRST, b"{oops"), 'not JSON: "{oops"'),
    "no_chunk": ((), "the stream ended without a chunk"),
}


@pytest.mark.parametrize(
    ("chunks", "what"), MALFORMED_STREAMS.values(), ids=MALFORMED_STREAMS.keys()
)
def test_a_malformed_stream_is_a_model_error(
    srv: FakeOpenAI, chunks: tuple[object, ...], what: str
) -> None:
    srv.enqueue(raw_stream(*chunks))
    with pytest.raises(ModelError) as exc:
        ask(make_llm(srv, stream=True, sleep=Sleeps()))
    assert str(exc.value) == f"model 'gpt-test' at {srv.base_url}: malformed reply: {what}"
    assert len(srv.requests) == 1


def test_a_web_page_instead_of_a_reply(srv: FakeOpenAI) -> None:
    srv.enqueue(raw(b"<html><body>Bad gateway</body></html>", content_type="text/html"))
    with pytest.raises(ModelError) as exc:
        ask(make_llm(srv))
    assert str(exc.value) == (
        f"model 'gpt-test' at {srv.base_url}: malformed reply: "
        'the reply is not a JSON object: "<html><body>Bad gateway</body></html>"'
    )


def test_a_malformed_reply_never_shows_the_key(srv: FakeOpenAI) -> None:
    srv.enqueue(raw({"choices": "echo sk-secret-123"}))
    with pytest.raises(ModelError) as exc:
        ask(make_llm(srv, api_key="sk-secret-123"))
    assert str(exc.value) == (
        f"model 'gpt-test' at {srv.base_url}: malformed reply: "
        'choices is not a list: "echo [REDACTED]"'
    )


def test_429_waits_as_long_as_retry_after_says(srv: FakeOpenAI) -> None:
    sleeps = Sleeps()
    srv.enqueue(error(429, "Rate limit reached", retry_after=7), text("ok"))
    assert ask(make_llm(srv, sleep=sleeps), within=60).message.content == "ok"
    assert sleeps == [pytest.approx(7.0, abs=0.1)]
    assert len(srv.requests) == 2


def test_500_twice_then_success_backs_off_exponentially(srv: FakeOpenAI) -> None:
    sleeps = Sleeps()
    srv.enqueue(error(500, "boom"), error(502, "bad gateway"), text("ok"))
    assert ask(make_llm(srv, sleep=sleeps), within=60).message.content == "ok"
    assert len(srv.requests) == 3
    assert len(sleeps) == 2
    assert 0.5 <= sleeps[0] <= 1.0
    assert 1.0 <= sleeps[1] <= 2.0


def test_gives_up_after_max_attempts(srv: FakeOpenAI) -> None:
    sleeps = Sleeps()
    srv.enqueue(*[error(503, "The engine is currently overloaded")] * 3)
    with pytest.raises(ModelError) as exc:
        ask(make_llm(srv, sleep=sleeps, max_attempts=3), within=60)
    assert str(exc.value) == (
        f"model 'gpt-test' at {srv.base_url}: HTTP 503: The engine is currently overloaded "
        "after 3 attempts; the endpoint is down or overloaded, try again later"
    )
    assert len(srv.requests) == 3
    assert len(sleeps) == 2


def test_401_fails_at_once_and_never_shows_the_key(srv: FakeOpenAI) -> None:
    srv.enqueue(error(401, "Incorrect API key provided: sk-secret-123.", code="invalid_api_key"))
    llm = make_llm(srv, api_key="sk-secret-123", sleep=Sleeps())
    with pytest.raises(ModelError) as exc:
        ask(llm)
    assert str(exc.value) == (
        f"model 'gpt-test' at {srv.base_url}: HTTP 401: Incorrect API key provided: [REDACTED].; "
        "check the API key in $OPENAI_API_KEY / the provider's api_key_env"
    )
    assert "sk-secret-123" not in str(exc.value)
    assert len(srv.requests) == 1


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (400, "the endpoint refused the request; check that the model supports tool calls"),
        (403, "the API key has no access to this model; check its permissions with the provider"),
        (404, "check the model name and the provider's base_url"),
        (
            422,
            "the endpoint could not process the request; check that the model supports tool calls",
        ),
    ],
)
def test_client_errors_fail_at_once(srv: FakeOpenAI, status: int, advice: str) -> None:
    srv.enqueue(error(status, "nope"))
    with pytest.raises(ModelError) as exc:
        ask(make_llm(srv, sleep=Sleeps()))
    assert str(exc.value) == f"model 'gpt-test' at {srv.base_url}: HTTP {status}: nope; {advice}"
    assert len(srv.requests) == 1


def test_insufficient_quota_is_not_retried(srv: FakeOpenAI) -> None:
    sleeps = Sleeps()
    quota = error(429, "You exceeded your current quota.", code="insufficient_quota")
    srv.enqueue(quota, text("never"))
    with pytest.raises(
        ModelError,
        match=r"HTTP 429: You exceeded your current quota\.; the account is out of quota",
    ):
        ask(make_llm(srv, sleep=sleeps))
    assert len(srv.requests) == 1
    assert sleeps == []


@pytest.mark.parametrize(
    ("refusal", "advice"),
    [
        (
            error(401, "Incorrect API key provided: sk-secret-123.", code="invalid_api_key"),
            "check the API key in $OPENAI_API_KEY / the provider's api_key_env",
        ),
        (
            error(429, "You exceeded your current quota.", code="insufficient_quota"),
            "the account is out of quota; check billing with the provider or use another provider",
        ),
    ],
)
def test_a_refused_key_or_account_fails_every_later_call_without_a_request(
    srv: FakeOpenAI, refusal: Reply, advice: str
) -> None:
    srv.enqueue(refusal, text("never"))
    llm = make_llm(srv, api_key="sk-secret-123", sleep=Sleeps())
    messages = []
    for _ in range(3):
        with pytest.raises(ModelError) as exc:
            ask(llm)
        messages.append(str(exc.value))
    detail = refusal.body["error"]["message"].replace("sk-secret-123", "[REDACTED]")  # type: ignore[index]
    status = refusal.status
    assert (
        messages == [f"model 'gpt-test' at {srv.base_url}: HTTP {status}: {detail}; {advice}"] * 3
    )
    assert len(srv.requests) == 1


def test_a_403_refuses_that_model_only(srv: FakeOpenAI) -> None:
    srv.enqueue(error(403, "no access to gpt-test"), text("other model"))
    llm = make_llm(srv, sleep=Sleeps())
    for _ in range(2):
        with pytest.raises(ModelError, match="HTTP 403: no access to gpt-test"):
            ask(llm)
    other = ChatRequest("gpt-other", REQUEST.messages)
    assert ask(llm, other).message.content == "other model"
    assert len(srv.requests) == 2


def test_429s_wait_as_long_as_the_deadline_allows_not_max_attempts(srv: FakeOpenAI) -> None:
    sleeps = Sleeps()
    srv.enqueue(*[error(429, "Rate limit reached", retry_after=1)] * 4, text("ok"))
    assert ask(make_llm(srv, sleep=sleeps, max_attempts=2), within=60).message.content == "ok"
    assert len(srv.requests) == 5
    assert sleeps == [pytest.approx(1.0, abs=0.1)] * 4


def test_adapters_sharing_a_breaker_wait_out_one_storm(srv: FakeOpenAI) -> None:
    from claw_batch.llm.breaker import Breaker

    sleeps = Sleeps()
    breaker = Breaker(sleep=sleeps)
    first, second = (make_llm(srv, breaker=breaker) for _ in range(2))
    srv.enqueue(error(429, "Rate limit reached", retry_after=5), text("probe"), text("after"))
    assert ask(first, within=60).message.content == "probe"
    assert ask(second, within=60).message.content == "after"
    assert sleeps == [pytest.approx(5.0, abs=0.1)]  # the second was not sent into the storm
    assert len(srv.requests) == 3


def test_a_storm_across_threads_costs_one_request_per_wait(srv: FakeOpenAI) -> None:
    """8 calls at once; the endpoint answers 429 (Retry-After: 0.2 s) for its first second."""
    start = time.monotonic()
    storm: list[float] = []

    def handler(body: dict[str, Any]) -> Reply:
        if time.monotonic() - start < 1.0:
            storm.append(time.monotonic())
            return error(429, "Rate limit reached", retry_after=0.2)
        return text("ok")

    srv.handler = handler
    llm = make_llm(srv)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: ask(llm, within=30).message.content, range(8)))
    assert answers == ["ok"] * 8
    # The first 8 in flight, then one probe every 0.2 s (each waits out its own 429, too).
    assert len(storm) <= 8 + 1.0 / 0.2 + 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_hung_endpoint_cannot_outlive_the_deadline(srv: FakeOpenAI, stream: bool) -> None:
    srv.enqueue(hang(HANG))
    with pytest.raises(LimitExceeded) as exc:
        ask(make_llm(srv, stream=stream), within=1.0)
    assert srv.hanging == 1  # it ended at the deadline, not with the hang
    assert str(exc.value) == "timeout: the model call did not finish before the job's deadline"


def test_request_timeout_is_retried_like_a_connection_error(srv: FakeOpenAI) -> None:
    sleeps = Sleeps()
    srv.enqueue(hang(30), hang(30))
    llm = make_llm(srv, request_timeout=0.2, max_attempts=2, sleep=sleeps)
    with pytest.raises(ModelError) as exc:
        ask(llm)
    assert str(exc.value) == (
        f"model 'gpt-test' at {srv.base_url}: connection error: Request timed out. after 2 "
        "attempts; the endpoint is down or overloaded, try again later"
    )
    assert len(sleeps) == 1


def test_retry_after_beyond_the_deadline_fails_at_once(srv: FakeOpenAI) -> None:
    sleeps = Sleeps()
    srv.enqueue(error(429, "Rate limit reached", retry_after=120))
    llm = make_llm(srv, sleep=sleeps, clock=lambda: 100.0)
    with pytest.raises(LimitExceeded) as exc:
        llm.complete(REQUEST, deadline=105.0)
    assert str(exc.value) == (
        "timeout: the model endpoint asked to retry after 120 s (HTTP 429: Rate limit reached), "
        "which exceeds the 5.0 s left before the job's deadline"
    )
    assert sleeps == []


def test_refused_local_connection_fails_at_once() -> None:
    """Nothing listens on this machine's port: no wait fixes that (timeouts are retried)."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    llm = OpenAICompatLLM(
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key="k",
        max_attempts=2,
        sleep=sleeps,
        base_url_from="providers.local.base_url in clawfile.yaml",
    )
    with pytest.raises(ModelError) as exc:
        ask(llm)
    assert str(exc.value) == (
        f"connection refused: http://127.0.0.1:{port}/v1 (model 'gpt-test'); is the server "
        "running? check providers.local.base_url in clawfile.yaml"
    )
    assert sleeps == []


def test_never_reads_the_environment(srv: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    srv.enqueue(text("one"), text("two"))
    ask(OpenAICompatLLM(base_url=srv.base_url, api_key=None))
    ask(OpenAICompatLLM(base_url=srv.base_url, api_key=""))
    assert [h["authorization"] for h in srv.headers] == ["Bearer sk-no-key"] * 2
    default = OpenAICompatLLM(base_url=None, api_key=None)
    assert default.base_url == "https://api.openai.com/v1"


def test_the_fake_says_when_its_script_ran_out(srv: FakeOpenAI) -> None:
    with pytest.raises(ModelError, match="FakeOpenAI: the script ran out of replies"):
        ask(make_llm(srv, max_attempts=1))


def test_the_fake_serves_concurrent_requests_in_parallel(srv: FakeOpenAI) -> None:
    # No request is answered before all four are in: served one at a time, the first would
    # wait for the others until the barrier broke, and its call would fail.
    together = threading.Barrier(4, timeout=HANG)

    def handler(body: dict[str, Any]) -> Reply:
        together.wait()
        return text(body["messages"][0]["content"])

    srv.handler = handler
    llm = make_llm(srv, max_attempts=1)
    requests = [ChatRequest("m", (Message("user", f"q{n}"),)) for n in range(4)]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda r: ask(llm, r, within=2 * HANG).message.content, requests))
    assert answers == ["q0", "q1", "q2", "q3"]


def test_retry_after_headers() -> None:
    in_30s = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert retry_after({"retry-after": "12"}) == 12.0
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert 20 <= (retry_after({"retry-after": in_30s}) or 0) <= 30  # a busy machine is slow
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


def test_ctrl_c_ends_a_hung_call_at_once(srv: FakeOpenAI) -> None:
    from claw_batch import cancel

    srv.enqueue(hang(HANG), text("the next call"))
    llm = make_llm(srv)
    threading.Thread(target=lambda: srv.hung.wait(HANG) and cancel.cancel()).start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            ask(llm, within=2 * HANG)
    finally:
        cancel.reset()
    assert since(started) < NOT_HELD_UP  # Ctrl-C ended it, not the hang nor the deadline
    # The abandoned call keeps its thread until its own timeout; the next one is not held up.
    assert ask(llm).message.content == "the next call"
    assert srv.hanging == 1  # the first reply still hangs: the next call did not wait for it


def test_calls_after_a_deadline_are_not_held_up_by_the_abandoned_one(srv: FakeOpenAI) -> None:
    srv.enqueue(hang(HANG), text("served"))
    llm = make_llm(srv)
    with pytest.raises(LimitExceeded):
        ask(llm, within=1.0)  # time to reach the endpoint on a busy machine
    assert ask(llm).message.content == "served"
    assert srv.hanging == 1  # the first reply still hangs: the second call did not wait for it


def test_headers_sent(srv: FakeOpenAI) -> None:
    srv.enqueue(text("hi"))
    ask(make_llm(srv))
    host = srv.base_url.split("/")[2]
    assert srv.headers[0] == {
        "host": host,
        "authorization": "Bearer sk-test",
        "content-type": "application/json",
        "accept": "application/json",
        "user-agent": f"claw/{__version__}",
        "content-length": str(len(json.dumps(srv.requests[0], separators=(",", ":")))),
    }


def test_a_trickling_endpoint_cannot_outlive_the_deadline(srv: FakeOpenAI) -> None:
    # A byte every 0.1 s: no read ever times out, and the whole reply (some 350 bytes) takes
    # longer than HANG.
    srv.enqueue(trickle(0.1))
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as exc:
        ask(make_llm(srv), within=1.0)
    assert since(started) < NOT_HELD_UP
    assert str(exc.value) == TIMEOUT


def test_calls_run_on_the_jobs_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # names no proxy
    assert OpenAICompatLLM(base_url="http://127.0.0.1:9/v1", api_key="sk-test")._inline


def test_with_a_proxy_calls_run_on_a_call_thread_and_still_end_at_the_deadline(
    srv: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # httpx reaches a proxy through a transport of its own, not through claw's sockets.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    llm = make_llm(srv)
    assert not llm._inline
    srv.enqueue(text("through the call thread"), hang(HANG))
    assert ask(llm).message.content == "through the call thread"
    with pytest.raises(LimitExceeded):
        ask(llm, within=1.0)
    assert srv.hanging == 1  # it ended at the deadline, not with the hang


def test_an_error_in_a_stream_is_a_model_error_without_the_key(srv: FakeOpenAI) -> None:
    srv.enqueue(raw_stream(FIRST, {"error": {"message": "overloaded (key sk-secret-123)"}}))
    with pytest.raises(ModelError) as exc:
        ask(make_llm(srv, api_key="sk-secret-123", stream=True, sleep=Sleeps()))
    assert str(exc.value) == f"model 'gpt-test' at {srv.base_url}: overloaded (key [REDACTED])"
    assert len(srv.requests) == 1


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"HTTPS_PROXY": "http://proxy.invalid:3128"},
        {"http_proxy": "http://proxy.invalid:3128"},
        {"ALL_PROXY": "socks5://proxy.invalid:1080"},
        {"https_proxy": ""},
        {"NO_PROXY": "127.0.0.1", "no_proxy": "*"},
    ],
)
def test_a_proxy_is_seen_as_urllib_sees_it(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    """`proxied` reads the environment itself (urllib.request costs every run ~20 ms of
    imports); it must decide as urllib.request.getproxies() does."""
    import urllib.request

    from claw_batch.llm.openai_compat import proxied

    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert proxied() == any(s != "no" for s in urllib.request.getproxies())

"""Any OpenAI-compatible chat completions endpoint (OpenAI, Ollama, llama.cpp, vLLM, ...).

The only module that imports `openai`; the rest of claw imports this one lazily.
Every attempt runs in a daemon thread so that a hung or trickling endpoint cannot keep
`complete` past the job's deadline; retries and their backoff are ours (`max_retries=0`).
"""

from __future__ import annotations

import concurrent.futures
import email.utils
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from claw_batch.errors import LimitExceeded, ModelError
from claw_batch.messages import ChatRequest, Completion, Message, ToolCall, ToolSpec, Usage

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
BACKOFF_BASE = 1.0
BACKOFF_CAP = 60.0
TIMEOUT = "timeout: the model call did not finish before the job's deadline"
ADVICE = {
    400: "the endpoint refused the request; check that the model supports tool calls",
    401: "check the API key in $OPENAI_API_KEY / the provider's api_key_env",
    403: "the API key has no access to this model; check its permissions with the provider",
    404: "check the model name and the provider's base_url",
    422: "the endpoint could not process the request; check that the model supports tool calls",
    429: "the account is out of quota; check billing with the provider or use another provider",
}


@dataclass(frozen=True)
class _Retryable:
    reason: str  # "HTTP 503: overloaded", "connection error: ..."
    retry_after: float | None  # what the endpoint asked for, in seconds


class OpenAICompatLLM:
    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        stream: bool = False,
        request_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        max_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Local endpoints (Ollama, llama.cpp) want no key, but the SDK insists on one.
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "sk-no-key"
        self._client = openai.OpenAI(base_url=base_url, api_key=self._api_key, max_retries=0)
        self._stream = stream
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._max_attempts = max(1, max_attempts)
        self._sleep = sleep
        self._clock = clock

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        for attempt in range(1, self._max_attempts + 1):
            try:
                return self._attempt(request, deadline)
            except openai.APIStatusError as exc:
                failure = self._classify(exc, request)
            except openai.APIConnectionError as exc:  # includes APITimeoutError
                failure = _Retryable(f"connection error: {exc.message}", None)
            except openai.OpenAIError as exc:
                raise ModelError(self._where(request) + f": {self._redact(str(exc))}") from None
            if self._clock() >= deadline:  # e.g. the SDK's own timeout, capped at the deadline
                raise LimitExceeded(TIMEOUT)
            if attempt == self._max_attempts:
                raise ModelError(
                    f"{self._where(request)}: {failure.reason} after {attempt} attempts; "
                    "the endpoint is down or overloaded, try again later"
                )
            self._pause(attempt, failure, deadline)
        raise AssertionError("unreachable")

    def _attempt(self, request: ChatRequest, deadline: float) -> Completion:
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise LimitExceeded(TIMEOUT)
        future: concurrent.futures.Future[Completion] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(self._call(request, remaining, deadline))
            except BaseException as exc:  # handed to the waiting thread, which decides
                future.set_exception(exc)

        threading.Thread(target=run, name="claw-model-call", daemon=True).start()
        done, _ = concurrent.futures.wait([future], timeout=remaining)
        if not done:
            raise LimitExceeded(TIMEOUT)  # the daemon thread ends with its own SDK timeout
        return future.result()

    def _call(self, request: ChatRequest, remaining: float, deadline: float) -> Completion:
        timeout = openai.Timeout(
            min(self._request_timeout, remaining), connect=min(self._connect_timeout, remaining)
        )
        # Post the wire body ourselves: `chat.completions.create` re-walks every message with
        # the SDK's TypedDict transformer on each call, which grows with the conversation.
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [wire_message(m) for m in request.messages],
        }
        if request.tools:
            body["tools"] = [wire_tool(t) for t in request.tools]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        options: openai.RequestOptions = {"timeout": timeout, "security": {"bearer_auth": True}}
        post = self._client.post
        if not self._stream:
            response = post("/chat/completions", cast_to=ChatCompletion, body=body, options=options)
            if not isinstance(response, openai.BaseModel):  # the SDK's answer to non-JSON
                raise ModelError(f"{self._where(request)}: not a chat completion: {response:.200}")
            return completion_from_dict(response.to_dict())
        body |= {"stream": True, "stream_options": {"include_usage": True}}
        chunks = post(
            "/chat/completions",
            cast_to=ChatCompletion,
            body=body,
            options=options,
            stream=True,
            stream_cls=openai.Stream[ChatCompletionChunk],
        )
        with chunks:
            return completion_from_chunks(self._until(deadline, (c.to_dict() for c in chunks)))

    def _until(self, deadline: float, chunks: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        # Lets an abandoned thread stop reading a trickling stream once the deadline passed.
        for chunk in chunks:
            if self._clock() > deadline:
                raise LimitExceeded(TIMEOUT)
            yield chunk

    def _classify(self, exc: openai.APIStatusError, request: ChatRequest) -> _Retryable:
        status = exc.status_code
        detail = self._redact(_error_detail(exc))
        quota = "insufficient_quota" in (exc.code, exc.type)
        if status in RETRY_STATUSES and not quota:
            return _Retryable(f"HTTP {status}: {detail}", retry_after(exc.response.headers))
        advice = ADVICE.get(status, "the request cannot succeed as it is")
        raise ModelError(f"{self._where(request)}: HTTP {status}: {detail}; {advice}")

    def _pause(self, attempt: int, failure: _Retryable, deadline: float) -> None:
        left = deadline - self._clock()
        if failure.retry_after is not None:
            wait = failure.retry_after
            if wait > left:
                raise LimitExceeded(
                    f"timeout: the model endpoint asked to retry after {_seconds(wait)} "
                    f"({failure.reason}), which exceeds the {_seconds(left)} left before the "
                    "job's deadline"
                )
        else:
            wait = backoff(attempt)
            if wait >= left:
                raise LimitExceeded(
                    f"timeout: the model call failed ({failure.reason}) and the job's deadline "
                    "leaves no time to retry"
                )
        self._sleep(wait)

    def _where(self, request: ChatRequest) -> str:
        return f"model {request.model!r} at {str(self._client.base_url).rstrip('/')}"

    def _redact(self, text: str) -> str:
        # Some endpoints echo the key they refused; it must never reach a log or a terminal.
        return text.replace(self._api_key, "***") if len(self._api_key) >= 4 else text


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter: about 1, 2, 4, ... s, never above the cap."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (attempt - 1))
    return ceiling * random.uniform(0.5, 1.0)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait an endpoint asked for: `retry-after-ms`, or `Retry-After` in seconds or a date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _seconds(value: float) -> str:
    value = max(value, 0.0)
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def _error_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else body
    text = str(message or exc.message or "no error message").strip()
    text = " ".join(text.split())  # one line
    return text if len(text) <= 300 else text[:297] + "..."


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
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def wire_tool(tool: ToolSpec) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return {"type": "function", "function": function}


def completion_from_dict(data: Mapping[str, Any]) -> Completion:
    choices = data.get("choices") or []
    if not choices:
        raise ModelError(f"the model endpoint answered without a choice: {str(data)[:200]}")
    choice = choices[0]
    wire = choice.get("message") or {}
    calls = tuple(
        _tool_call(c.get("id"), c.get("function") or {}, n)
        for n, c in enumerate(wire.get("tool_calls") or [])
    )
    message = Message("assistant", wire.get("content"), calls)
    return Completion(
        message, usage_from(data.get("usage")), choice.get("finish_reason"), _model(data)
    )


def completion_from_chunks(chunks: Iterable[Mapping[str, Any]]) -> Completion:
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage, finish, model = Usage(), None, ""
    for chunk in chunks:
        model = _model(chunk) or model
        if chunk.get("usage"):
            usage = usage_from(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            for n, piece in enumerate(delta.get("tool_calls") or []):
                _merge_call(calls.setdefault(piece.get("index", n), {}), piece)
            finish = choice.get("finish_reason") or finish
    tool_calls = tuple(
        _tool_call(c.get("id"), c, n) for n, c in enumerate(calls[i] for i in sorted(calls))
    )
    text = "".join(content) or (None if tool_calls else "")
    return Completion(Message("assistant", text, tool_calls), usage, finish, model)


def _merge_call(acc: dict[str, Any], piece: Mapping[str, Any]) -> None:
    function = piece.get("function") or {}
    if piece.get("id"):
        acc["id"] = piece["id"]
    if function.get("name") and not acc.get("name"):
        acc["name"] = function["name"]
    acc["arguments"] = acc.get("arguments", "") + (function.get("arguments") or "")


def _tool_call(id: str | None, function: Mapping[str, Any], n: int) -> ToolCall:
    return ToolCall(id or f"call_{n}", function.get("name") or "", function.get("arguments") or "")


def usage_from(usage: Mapping[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        usage.get("prompt_tokens") or 0,
        usage.get("completion_tokens") or 0,
        details.get("cached_tokens") or 0,
    )


def _model(data: Mapping[str, Any]) -> str:
    return str(data.get("model") or "")

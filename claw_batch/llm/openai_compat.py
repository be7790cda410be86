"""Any OpenAI-compatible chat completions endpoint (OpenAI, Ollama, llama.cpp, vLLM, ...).

The only module that imports `openai`; the rest of claw imports this one lazily.
A hung or trickling endpoint cannot keep `complete` past the job's deadline, and Ctrl-C ends
a call at once: the call runs on the job's thread over `interruptible`'s sockets or, when a
proxy is configured (its connections would not be made by that backend), on a daemon thread
of `callthreads` that the job stops waiting for. Retries are ours (`max_retries=0`), paced by
the endpoint's `breaker`, which every job calling it shares: a 429 storm or a 5xx burst is
waited out together, and a refused key or account fails every later call at once.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import httpx2
import openai

from claw_batch import cancel
from claw_batch.errors import LimitExceeded, ModelError
from claw_batch.llm import failures, interruptible, wire
from claw_batch.llm.breaker import Breaker, Ticket
from claw_batch.llm.callthreads import CallThreads
from claw_batch.llm.messages import ChatRequest, Completion
from claw_batch.safety.redact import Redactor

NO_KEY = "sk-no-key"  # what keyless local servers (Ollama, llama.cpp) are sent
DEFAULT_BASE_URL = "https://api.openai.com/v1"  # the SDK's, without its $OPENAI_BASE_URL
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
TIMEOUT = "timeout: the model call did not finish before the job's deadline"
ADVICE = {
    400: "the endpoint refused the request; check that the model supports tool calls",
    401: "check the API key in $OPENAI_API_KEY / the provider's api_key_env",
    403: "the API key has no access to this model; check its permissions with the provider",
    404: "check the model name and the provider's base_url",
    422: "the endpoint could not process the request; check that the model supports tool calls",
    429: "the account is out of quota; check billing with the provider or use another provider",
}
CALL_THREADS = CallThreads()  # shared by every endpoint of the run
# The SDK's platform telemetry (OS, arch, runtime and versions), left out: no endpoint needs
# it, and every header costs each request a trip through httpx's and h11's validation (these
# seven are ~15 % of the SDK's Python work per call). Auth, content type, user agent, retry
# count and read timeout are still sent.
TELEMETRY_HEADERS = (
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
)

OMITTED_HEADERS = {name: openai.Omit() for name in TELEMETRY_HEADERS}
IDEMPOTENCY_KEY = "claw"


@dataclass(frozen=True)
class _Retryable:
    reason: str  # "HTTP 503: overloaded", "connection error: ..."
    retry_after: float | None  # what the endpoint asked for, in seconds
    rate_limited: bool = False  # a 429


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
        sleep: Callable[[float], None] = cancel.sleep,
        clock: Callable[[], float] = time.monotonic,
        breaker: Breaker | None = None,
        base_url_from: str = "the base URL",  # where a user changes it, for messages
    ) -> None:
        # Always an explicit key and URL: given none, the SDK would read $OPENAI_API_KEY and
        # $OPENAI_BASE_URL, and the caller decides which environment counts.
        http_client = _interruptible_client()
        self._inline = http_client is not None
        self._client = openai.OpenAI(
            base_url=base_url or DEFAULT_BASE_URL,
            api_key=api_key or NO_KEY,
            max_retries=0,
            http_client=http_client,
        )
        # Absolute: the SDK would otherwise parse and rebuild the base URL for every request.
        # A base URL with no path prints without its slash (`http://host:9`).
        self._url = f"{str(self._client.base_url).rstrip('/')}/chat/completions"
        # Some endpoints echo the key they refused; it must never reach a log or a terminal.
        self._redact = Redactor([api_key] if api_key else [])
        self._stream = stream
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._max_attempts = max(1, max_attempts)
        self._clock = clock
        # Shared by the endpoint's users (endpoints.Models): one storm, one backoff.
        self._breaker = breaker or Breaker(clock=clock, sleep=sleep)
        self._base_url_from = base_url_from

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        failures = 0
        while True:
            ticket = self._breaker.admit(request.model, deadline)
            outcome = self._try(request, deadline, ticket)
            if isinstance(outcome, Completion):
                return outcome
            if self._clock() >= deadline:  # e.g. the SDK's own timeout, capped at the deadline
                raise LimitExceeded(TIMEOUT)
            # A 429 is an endpoint that works and asks for patience: the breaker paces the
            # retries, the deadline bounds them. Other failures count.
            failures += not outcome.rate_limited
            if failures == self._max_attempts:
                raise ModelError(
                    f"{self._where(request)}: {outcome.reason} after {failures} attempts; "
                    "the endpoint is down or overloaded, try again later"
                )

    def _try(
        self, request: ChatRequest, deadline: float, ticket: Ticket
    ) -> Completion | _Retryable:
        """One request; a failure that waiting may fix is told to the breaker and returned."""
        try:
            completion = self._attempt(request, deadline)
        except openai.APIStatusError as exc:
            failure = self._classify(exc, request, ticket)
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            failure = self._connection_failure(exc, request, ticket)
        except openai.OpenAIError as exc:
            self._breaker.abandoned(ticket)
            raise ModelError(f"{self._where(request)}: {self._redact(str(exc))}") from None
        except RecursionError:
            self._breaker.abandoned(ticket)
            raise ModelError(
                f"{self._where(request)}: malformed reply: JSON nested too deep"
            ) from None
        except wire.MalformedReply as exc:
            self._breaker.abandoned(ticket)
            detail = self._redact(str(exc))
            raise ModelError(f"{self._where(request)}: malformed reply: {detail}") from None
        except BaseException:  # the job's deadline, Ctrl-C
            self._breaker.abandoned(ticket)
            raise
        else:
            self._breaker.succeeded(ticket)
            return completion
        self._breaker.failed(ticket, failure.reason, failure.retry_after)
        return failure

    def _attempt(self, request: ChatRequest, deadline: float) -> Completion:
        budget = deadline - self._clock()
        if budget <= 0:
            raise LimitExceeded(TIMEOUT)
        if self._inline:
            with interruptible.deadline(time.monotonic() + budget):
                return self._call(request, budget, deadline)
        call = CALL_THREADS.submit(lambda: self._call(request, budget, deadline))
        # Given up on, the call goes on on its thread until its own SDK timeout ends it.
        left = budget
        while not call.wait(min(left, cancel.POLL)):
            cancel.check()
            left = deadline - self._clock()
            if left <= 0:
                raise LimitExceeded(TIMEOUT)
        return call.result()

    def _call(self, request: ChatRequest, remaining: float, deadline: float) -> Completion:
        timeout = openai.Timeout(
            min(self._request_timeout, remaining), connect=min(self._connect_timeout, remaining)
        )
        options: openai.RequestOptions = {
            "timeout": timeout,
            "security": {"bearer_auth": True},
            "headers": OMITTED_HEADERS,
            # Only sent by clients that name an idempotency header, which this one does not;
            # given none, the SDK makes a uuid4 for every request (a getrandom system call).
            "idempotency_key": IDEMPOTENCY_KEY,
        }
        # Post the wire body ourselves: `chat.completions.create` re-walks every message with
        # the SDK's TypedDict transformer on each call, which grows with the conversation. And
        # take the reply as plain JSON (`cast_to=object`): `wire` reads it, odd shapes included.
        body = wire.request_json(request, stream=self._stream)
        try:
            if not self._stream:
                reply = self._client.post(self._url, cast_to=object, content=body, options=options)
                return wire.completion_from_reply(reply)
            return self._streamed(body, options, deadline)
        except json.JSONDecodeError as exc:  # raised by the SDK as it decodes a body or chunk
            raise wire.MalformedReply(f"not JSON: {wire.excerpt(exc.doc)}") from None

    def _streamed(self, body: bytes, options: openai.RequestOptions, deadline: float) -> Completion:
        chunks = self._client.post(
            self._url,
            cast_to=object,
            content=body,
            options=options,
            stream=True,
            stream_cls=openai.Stream[object],
        )
        with chunks:
            if chunks.response.headers.get("content-type", "").startswith("application/json"):
                # An endpoint that ignores `stream` and answers with the whole reply.
                return wire.completion_from_reply(json.loads(chunks.response.read()))
            return wire.completion_from_chunks(self._until(deadline, chunks))

    def _until(self, deadline: float, chunks: Iterable[object]) -> Iterator[object]:
        # Lets an abandoned thread stop reading a trickling stream once the deadline passed.
        for chunk in chunks:
            if self._clock() > deadline:
                raise LimitExceeded(TIMEOUT)
            yield chunk

    def _classify(
        self, exc: openai.APIStatusError, request: ChatRequest, ticket: Ticket
    ) -> _Retryable:
        status = exc.status_code
        detail = self._redact(failures.error_detail(exc.body, exc.message))
        quota = "insufficient_quota" in (exc.code, exc.type)
        if status in RETRY_STATUSES and not quota:
            reason = f"HTTP {status}: {detail}"
            return _Retryable(reason, retry_after(exc.response.headers), status == 429)
        self._breaker.succeeded(ticket)  # it answered: up, if not for this request
        advice = ADVICE.get(status, "the request cannot succeed as it is")
        message = f"{self._where(request)}: HTTP {status}: {detail}; {advice}"
        if quota or status == 401:  # the key or the account: no call to this endpoint can work
            self._breaker.broken(message)
        elif status == 403:  # the key's access to this model
            self._breaker.broken(message, request.model)
        raise ModelError(message)

    def _connection_failure(
        self, exc: openai.APIConnectionError, request: ChatRequest, ticket: Ticket
    ) -> _Retryable:
        """Retryable, unless no wait can fix it: nothing listens on this machine's port, or
        the host does not exist (five retries would only make the user wait ~15 s)."""
        hopeless = failures.hopeless(exc, str(self._client.base_url).rstrip("/"))
        if hopeless is None:
            return _Retryable(f"connection error: {exc.message}", None)
        self._breaker.abandoned(ticket)
        raise ModelError(
            f"{hopeless} (model {request.model!r}); is the server running? "
            f"check {self._base_url_from}"
        ) from None

    def _where(self, request: ChatRequest) -> str:
        url = failures.shown_url(str(self._client.base_url).rstrip("/"))
        return f"model {request.model!r} at {url}"


class _HttpClient(openai.DefaultHttpxClient):
    """Closes its connections when dropped, as the SDK's own client does."""

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _interruptible_client() -> httpx2.Client | None:
    """The SDK's default HTTP client with its connections made by `interruptible.Backend`;
    None when the environment names a proxy: httpx would reach it through a transport of
    its own."""
    if any(scheme != "no" for scheme in urllib.request.getproxies()):  # "no": $NO_PROXY
        return None
    transport = httpx2.HTTPTransport(limits=openai.DEFAULT_CONNECTION_LIMITS)
    # httpx takes no network backend; its connection pool (httpcore2) does.
    pool = transport._pool
    pool._network_backend = interruptible.Backend(pool._network_backend)
    return _HttpClient(transport=transport)


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

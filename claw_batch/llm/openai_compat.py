"""Any OpenAI-compatible chat completions endpoint (OpenAI, Ollama, llama.cpp, vLLM, ...).

claw speaks chat completions over its own HTTP client (`transport`): a call runs on the job's
thread over `interruptible`'s sockets, so a hung or trickling endpoint cannot keep `complete`
past the job's deadline, and Ctrl-C ends it at once. When the environment names a proxy
(which that client does not reach through), the `openai` SDK makes the call, on a daemon
thread of `callthreads` that the job stops waiting for; this is the only module that imports
it, and only then. Retries are ours, paced by the endpoint's `breaker`, which every job
calling it shares: a 429 storm or a 5xx burst is waited out together, and a refused key or
account fails every later call at once. Whichever way the call went, its failure is
classified here, once.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from claw_batch import __version__, baton, cancel
from claw_batch.errors import LimitExceeded, ModelError
from claw_batch.llm import failures, interruptible, sse, wire
from claw_batch.llm.breaker import Breaker, Ticket
from claw_batch.llm.callthreads import CallThreads
from claw_batch.llm.failures import ConnectionFailure, EndpointError, StatusFailure, retry_after
from claw_batch.llm.interruptible import TIMEOUT
from claw_batch.llm.messages import ChatRequest, Completion
from claw_batch.llm.transport import Pool, Reply
from claw_batch.safety.redact import Redactor

if TYPE_CHECKING:
    import httpx2
    import openai

NO_KEY = "sk-no-key"  # what keyless local servers (Ollama, llama.cpp) are sent
DEFAULT_BASE_URL = "https://api.openai.com/v1"  # the SDK's, without its $OPENAI_BASE_URL
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
ADVICE = {
    400: "the endpoint refused the request; check that the model supports tool calls",
    401: "check the API key in $OPENAI_API_KEY / the provider's api_key_env",
    403: "the API key has no access to this model; check its permissions with the provider",
    404: "check the model name and the provider's base_url",
    422: "the endpoint could not process the request; check that the model supports tool calls",
    429: "the account is out of quota; check billing with the provider or use another provider",
}
CALL_THREADS = CallThreads()  # shared by every endpoint of the run
__all__ = ["TIMEOUT", "OpenAICompatLLM", "retry_after"]


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
        # Always an explicit key and URL: the SDK would read $OPENAI_API_KEY and
        # $OPENAI_BASE_URL, and the caller decides which environment counts. A base URL with
        # no path prints without its slash (`http://host:9`).
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        key = api_key or NO_KEY
        url = f"{self.base_url}/chat/completions"
        self._pool: Pool | None = None
        self._sdk: _ViaSdk | None = None
        if proxied():
            self._sdk = _ViaSdk(url, key)
        else:
            self._pool = Pool(url, _headers(key))
        self._inline = self._pool is not None  # calls run on the job's thread
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
            if self._clock() >= deadline:  # e.g. a request timeout, capped at the deadline
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
        except StatusFailure as exc:
            failure = self._classify(exc, request, ticket)
        except ConnectionFailure as exc:
            failure = self._connection_failure(exc, request, ticket)
        except EndpointError as exc:
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
        if self._sdk is None:
            with interruptible.deadline(time.monotonic() + budget):
                return self._call(request, budget, deadline)
        sdk = self._sdk
        call = CALL_THREADS.submit(lambda: self._via_sdk(sdk, request, budget, deadline))
        # Given up on, the call goes on on its thread until its own SDK timeout ends it.
        left = budget
        with baton.released():
            while not call.wait(min(left, cancel.POLL)):
                cancel.check()
                left = deadline - self._clock()
                if left <= 0:
                    raise LimitExceeded(TIMEOUT)
        return call.result()

    def _call(self, request: ChatRequest, remaining: float, deadline: float) -> Completion:
        """One request over claw's client, on this thread."""
        assert self._pool is not None
        body = wire.request_json(request, stream=self._stream)
        read = min(self._request_timeout, remaining)
        connect = min(self._connect_timeout, remaining)
        with self._pool.post(body, read_timeout=read, connect_timeout=connect) as reply:
            if not 200 <= reply.status < 300:
                raise StatusFailure.of_reply(reply.status, reply.read(), reply.headers)
            return self._decoded(reply, deadline)

    def _via_sdk(
        self, sdk: _ViaSdk, request: ChatRequest, remaining: float, deadline: float
    ) -> Completion:
        """One request through the SDK, on a call thread."""
        body = wire.request_json(request, stream=self._stream)
        read = min(self._request_timeout, remaining)
        connect = min(self._connect_timeout, remaining)
        with sdk.call(body, read, connect) as reply:
            return self._decoded(reply, deadline)

    def _decoded(self, reply: Reply | _SdkReply, deadline: float) -> Completion:
        """The completion a successful reply carries."""
        content_type = (reply.headers.get("content-type") or "").split(";")[0].strip()
        try:
            if self._stream and content_type != "application/json":
                chunks = sse.chunks(reply.lines())
                return wire.completion_from_chunks(self._until(deadline, chunks))
            data = reply.read()
            if not content_type.endswith("json"):  # a web page: said as it is
                return wire.completion_from_reply(data.decode("utf-8", "replace"))
            return wire.completion_from_reply(json.loads(data))
        except json.JSONDecodeError as exc:
            raise wire.MalformedReply(f"not JSON: {wire.excerpt(exc.doc)}") from None

    def _until(self, deadline: float, chunks: Iterable[object]) -> Iterator[object]:
        # Lets an abandoned thread stop reading a trickling stream once the deadline passed.
        for chunk in chunks:
            if self._clock() > deadline:
                raise LimitExceeded(TIMEOUT)
            yield chunk

    def _classify(self, exc: StatusFailure, request: ChatRequest, ticket: Ticket) -> _Retryable:
        status = exc.status
        detail = self._redact(failures.error_detail(exc.error, exc.fallback))
        quota = "insufficient_quota" in (exc.code(), exc.type())
        if status in RETRY_STATUSES and not quota:
            reason = f"HTTP {status}: {detail}"
            return _Retryable(reason, retry_after(exc.headers), status == 429)
        self._breaker.succeeded(ticket)  # it answered: up, if not for this request
        advice = ADVICE.get(status, "the request cannot succeed as it is")
        message = f"{self._where(request)}: HTTP {status}: {detail}; {advice}"
        if quota or status == 401:  # the key or the account: no call to this endpoint can work
            self._breaker.broken(message)
        elif status == 403:  # the key's access to this model
            self._breaker.broken(message, request.model)
        raise ModelError(message)

    def _connection_failure(
        self, exc: ConnectionFailure, request: ChatRequest, ticket: Ticket
    ) -> _Retryable:
        """Retryable, unless no wait can fix it: nothing listens on this machine's port, or
        the host does not exist (five retries would only make the user wait ~15 s)."""
        hopeless = failures.hopeless(exc, self.base_url)
        if hopeless is None:
            return _Retryable(f"connection error: {exc}", None)
        self._breaker.abandoned(ticket)
        raise ModelError(
            f"{hopeless} (model {request.model!r}); is the server running? "
            f"check {self._base_url_from}"
        ) from None

    def _where(self, request: ChatRequest) -> str:
        return f"model {request.model!r} at {failures.shown_url(self.base_url)}"


def _headers(key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": f"claw/{__version__}",
    }


class _SdkReply:
    """A successful reply the SDK received, read as `transport.Reply` is."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self.headers: Mapping[str, str] = response.headers

    def read(self) -> bytes:
        with _transport_errors():
            return self._response.read()

    def lines(self) -> Iterator[bytes]:
        with _transport_errors():
            for line in self._response.iter_lines():
                yield f"{line}\n".encode()

    def __enter__(self) -> _SdkReply:
        return self

    def __exit__(self, *exc: object) -> None:
        self._response.close()


@contextlib.contextmanager
def _transport_errors() -> Iterator[None]:
    import httpx2

    try:
        yield
    except httpx2.TimeoutException as exc:
        raise ConnectionFailure(failures.TIMED_OUT) from exc
    except httpx2.TransportError as exc:
        raise ConnectionFailure(failures.CONNECTION_ERROR) from exc


class _ViaSdk:
    """Behind a proxy: the `openai` SDK's client, which reaches it (httpx reads the proxy
    settings from the environment). Its import and client are made on a thread as soon as
    the endpoint is, not by the first job that calls it."""

    def __init__(self, url: str, key: str) -> None:
        self._url = url
        self._client: openai.OpenAI | None = None
        self._made = threading.Event()
        self._error: BaseException | None = None
        threading.Thread(target=self._make, args=(key,), daemon=True).start()

    def _make(self, key: str) -> None:
        try:
            import openai

            base_url = self._url.removesuffix("/chat/completions")
            self._client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
        except BaseException as exc:  # raised again in the calls that need the client
            self._error = exc
        finally:
            self._made.set()

    def call(self, body: bytes, read: float, connect: float) -> _SdkReply:
        """Post `body` and return the open reply; failures as `failures` says them."""
        import openai

        self._made.wait()
        if self._client is None:
            raise self._error or RuntimeError("the OpenAI client was not made")
        options: openai.RequestOptions = {
            "timeout": openai.Timeout(read, connect=connect),
            "security": {"bearer_auth": True},
            # Given none, the SDK makes a uuid4 for every request (a getrandom system call).
            "idempotency_key": "claw",
        }
        try:
            response = self._client.post(
                self._url,
                cast_to=object,
                content=body,
                options=options,
                stream=True,
                stream_cls=openai.Stream[object],
            )
        except openai.APIStatusError as exc:
            raise StatusFailure(
                exc.status_code, exc.body, exc.message, exc.response.headers
            ) from None
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise ConnectionFailure(exc.message) from exc
        except openai.OpenAIError as exc:
            raise EndpointError(str(exc)) from None
        return _SdkReply(response.response)


def sdk_client(base_url: str, key: str, *, max_retries: int = 2) -> openai.OpenAI:
    """The SDK's client for calls claw's own client does not make (the Files and Batches
    endpoints: llm.batchapi), given the key and base URL a live call is given."""
    import openai

    return openai.OpenAI(
        base_url=base_url,
        api_key=key,
        max_retries=max_retries,
        timeout=openai.Timeout(300.0, connect=10.0),
    )


@contextlib.contextmanager
def sdk_failures() -> Iterator[None]:
    """The SDK's failures in the block, as `failures` says them (StatusFailure,
    ConnectionFailure with its cause, EndpointError)."""
    import openai

    try:
        yield
    except openai.APIStatusError as exc:
        raise StatusFailure(exc.status_code, exc.body, exc.message, exc.response.headers) from None
    except openai.APIConnectionError as exc:  # includes APITimeoutError
        raise ConnectionFailure(exc.message) from exc
    except openai.OpenAIError as exc:
        raise EndpointError(str(exc)) from None


def proxied() -> bool:
    """Whether the environment names a proxy, as `urllib.request.getproxies()` reads it on
    Linux (any non-empty `*_proxy` variable but `no_proxy`, in either case), without its
    import: ~20 ms of every run's start-up. Elsewhere it may read the system's settings."""
    if sys.platform != "linux":
        import urllib.request

        return any(scheme != "no" for scheme in urllib.request.getproxies())
    return any(
        value and name.lower().endswith("_proxy") and name.lower() != "no_proxy"
        for name, value in os.environ.items()
    )

"""What an endpoint's failure says that is worth a user's reading: a connection that cannot
succeed by waiting (nothing listens on a local port, a host name that does not resolve), and
the cause a gateway nests in its error body (OpenRouter's `error.metadata.raw`).

Both ways claw reaches an endpoint (its own client, `transport`, and the SDK behind a proxy)
report a failure as one of the exceptions below, which the adapter classifies in one place.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import time
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

# getaddrinfo's answers that the name does not exist (EAI_AGAIN, a resolver that did not
# answer in time, may pass: that one is retried).
NO_SUCH_HOST = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)

# The SDK's words for a connection that failed or a reply that did not come in time.
CONNECTION_ERROR = "Connection error."
TIMED_OUT = "Request timed out."


class ConnectionFailure(Exception):
    """No reply: CONNECTION_ERROR or TIMED_OUT, the socket's error chained as the cause."""


class StatusFailure(Exception):
    """An error status. `error`: the reply's `error` object (or the whole body, or its text);
    `fallback`: what to say when it has no message."""

    def __init__(
        self, status: int, error: object, fallback: str, headers: Mapping[str, str]
    ) -> None:
        super().__init__(fallback)
        self.status = status
        self.error = error
        self.fallback = fallback
        self.headers = headers

    @classmethod
    def of_reply(cls, status: int, body: bytes, headers: Mapping[str, str]) -> StatusFailure:
        """From the bytes of an error reply, read as the SDK reads them."""
        text = body.decode("utf-8", "replace").strip()
        data: object = text
        with contextlib.suppress(ValueError, RecursionError):
            data = json.loads(text)
        error = data.get("error", data) if isinstance(data, dict) else data
        return cls(status, error, f"Error code: {status}", headers)

    def code(self) -> object:
        return self.error.get("code") if isinstance(self.error, dict) else None

    def type(self) -> object:
        return self.error.get("type") if isinstance(self.error, dict) else None


class EndpointError(Exception):
    """What the endpoint said went wrong, shown as it is: an error event in a stream."""


def shown_url(url: str) -> str:
    """The URL without the user and password it may carry (`http://user:pw@host/v1`)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def hopeless(exc: BaseException, url: str) -> str | None:
    """Why a connection failure is not an outage to wait out, or None when it may be: a
    refused connection to this machine (no server there: retries only make the user wait)
    or a host name that does not exist. A refusal from a remote host may be a restart."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError) and _loopback(url):
            return f"connection refused: {shown_url(url)}"
        if isinstance(cause, socket.gaierror) and cause.errno in NO_SUCH_HOST:
            return f"unknown host: {shown_url(url)}"
        cause = cause.__cause__ or cause.__context__
    return None


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def error_detail(body: object, fallback: str | None) -> str:
    """An error reply's message in one line, with the cause a gateway nests in it; at most
    300 characters. `body`: the reply's `error` object as the SDK gives it."""
    message = body.get("message") if isinstance(body, dict) else body
    text = str(message or fallback or "no error message").strip()
    cause = nested_cause(body)  # a gateway's "Provider returned error" says little
    if cause:
        text = f"{text} ({cause})"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def nested_cause(body: object) -> str | None:
    """The upstream provider's own words a gateway nests in its error (`metadata.raw`,
    OpenRouter's, with `metadata.provider_name`), in one line; None when there are none."""
    metadata = body.get("metadata") if isinstance(body, dict) else None
    raw = metadata.get("raw") if isinstance(metadata, dict) else None
    if raw is None or raw == "":
        return None
    text = raw if isinstance(raw, str) else json.dumps(raw)
    with_message = _message_of(text)
    provider = metadata.get("provider_name") if isinstance(metadata, dict) else None
    said = " ".join((with_message or text).split())
    return f"{provider} says: {said}" if isinstance(provider, str) and provider else said


def _message_of(text: str) -> str | None:
    """`{"error": {"message": "..."}}` or `{"message": "..."}` as raw text: its message."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    inner = data.get("error", data) if isinstance(data, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else inner
    return message if isinstance(message, str) and message.strip() else None


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
    import email.utils  # a Retry-After date is rare: not in every run's start-up

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())

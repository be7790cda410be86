"""What an endpoint's failure says that is worth a user's reading: a connection that cannot
succeed by waiting (nothing listens on a local port, a host name that does not resolve), and
the cause a gateway nests in its error body (OpenRouter's `error.metadata.raw`)."""

from __future__ import annotations

import ipaddress
import json
import socket
from urllib.parse import urlsplit, urlunsplit

# getaddrinfo's answers that the name does not exist (EAI_AGAIN, a resolver that did not
# answer in time, may pass: that one is retried).
NO_SUCH_HOST = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)


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

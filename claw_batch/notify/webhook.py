"""A webhook target: one HTTP(S) POST of a JSON body. 2xx delivers; a redirect is not
followed (the body would go where the URL's owner did not say); errors name the host only,
since a webhook's path and query are its secret."""

from __future__ import annotations

import base64
import math
import urllib.parse
from typing import TYPE_CHECKING

from claw_batch import __version__
from claw_batch.notify.attempt import Deadline, Miss, connect, seconds

if TYPE_CHECKING:
    import http.client
    import ssl

ANSWER_BYTES = 4096  # of a response's body: enough for a service's error word
SHOWN_CHARS = 100  # of that, in the error
MAX_WAIT = 30.0


def checked(url: str) -> Miss | None:
    """Why `url` cannot be posted to (before any attempt), or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, _ = parts.hostname, parts.port
    except ValueError:  # a bracket left open, a port that is no number
        return Miss("webhook: the URL cannot be read as a URL", final=True)
    if host is None or parts.scheme not in ("http", "https"):
        return Miss("webhook: the URL is not an http(s) URL with a host", final=True)
    return None


def post(url: str, body: bytes, *, timeout: float) -> Miss | None:
    """POST `body` to `url` (`checked`); None when it was taken (2xx)."""
    import http.client

    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port
    name = f"webhook {host}"
    secret = [s for s in (parts.path, parts.query) if len(s) > 1]
    context = _context(parts.scheme)
    conn = _connection(host, port, timeout, context)
    try:
        with Deadline(timeout) as deadline:
            try:
                # What `conn.connect()` does, the deadline's watch first
                conn.sock = connect(conn.host, conn.port, timeout, deadline, context)
                conn.request("POST", _target(parts), body=body, headers=_headers(parts))
                with conn.getresponse() as response:
                    answer = response.read(ANSWER_BYTES)
            except (OSError, http.client.HTTPException) as e:
                return _missed(name, e, timeout, deadline.passed)
    finally:
        conn.close()
    return _answered(name, response.status, response.getheader("Retry-After"), answer, secret)


def _context(scheme: str) -> ssl.SSLContext | None:
    if scheme != "https":
        return None
    import ssl

    return ssl.create_default_context()


def _connection(
    host: str, port: int | None, timeout: float, context: ssl.SSLContext | None
) -> http.client.HTTPConnection:
    import http.client

    if context is not None:
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    return http.client.HTTPConnection(host, port, timeout=timeout)


def _target(parts: urllib.parse.SplitResult) -> str:
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _headers(parts: urllib.parse.SplitResult) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": f"claw/{__version__}"}
    if parts.username is not None:  # https://user:password@host/...: HTTP basic auth
        login = (
            f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        )
        headers["Authorization"] = "Basic " + base64.b64encode(login.encode()).decode()
    return headers


def _missed(name: str, error: Exception, timeout: float, passed: bool) -> Miss:
    import http.client
    import ssl

    if passed or isinstance(error, TimeoutError):
        return Miss(f"{name}: timed out after {seconds(timeout)}")
    if isinstance(error, ConnectionRefusedError):
        return Miss(f"{name}: connection refused")
    if isinstance(error, ssl.SSLCertVerificationError):
        return Miss(f"{name}: its TLS certificate is not trusted ({error.verify_message})")
    if isinstance(error, ssl.SSLError):
        return Miss(f"{name}: TLS failed ({error.reason or type(error).__name__})")
    if isinstance(error, http.client.InvalidURL):
        return Miss(f"{name}: the URL holds characters no URL may hold", final=True)
    if isinstance(error, http.client.RemoteDisconnected):
        return Miss(f"{name}: the server closed the connection without an answer")
    if isinstance(error, http.client.HTTPException):
        return Miss(f"{name}: not an HTTP answer ({type(error).__name__})")
    return Miss(f"{name}: {getattr(error, 'strerror', None) or type(error).__name__}")


def _answered(
    name: str, status: int, retry_after: str | None, answer: bytes, secret: list[str]
) -> Miss | None:
    if 200 <= status < 300:
        return None
    said = f"{name}: HTTP {status}"
    if 300 <= status < 400:
        return Miss(f"{said} (a redirect: not followed)", final=True)
    if word := _word(answer, secret):
        said += f" {word}"
    if status == 429 or status == 408 or status >= 500:
        return Miss(said, wait=_retry_after(retry_after))
    return Miss(said, final=True)  # 4xx: the same request would be refused again


def _word(answer: bytes, secret: list[str]) -> str:
    """The start of the answer's first line, printable, if it does not echo the URL's
    secret parts (Slack answers `invalid_payload`, `no_service`)."""
    first = answer.decode(errors="replace").strip().split("\n", 1)[0]
    shown = "".join(ch for ch in first if ch.isprintable())[:SHOWN_CHARS].strip()
    if not shown or any(s in first or urllib.parse.unquote(s) in first for s in secret):
        return ""
    return f"({shown})"


def _retry_after(value: str | None) -> float | None:
    try:
        wait = float(value or "")
    except ValueError:
        return None  # an HTTP date, or nothing: the backoff decides
    return min(max(wait, 0.0), MAX_WAIT) if math.isfinite(wait) else None

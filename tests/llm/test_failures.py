"""Which connection failures are not worth waiting out, and a gateway's nested cause."""

from __future__ import annotations

import socket

import httpx2
import pytest

from claw_batch.llm.failures import hopeless, nested_cause, shown_url


def _connect_error(cause: BaseException) -> httpx2.ConnectError:
    try:
        raise httpx2.ConnectError(str(cause)) from cause
    except httpx2.ConnectError as exc:
        return exc


@pytest.mark.parametrize(
    ("cause", "url", "expected"),
    [
        (
            ConnectionRefusedError(111, "refused"),
            "http://localhost:11434/v1",
            "connection refused: http://localhost:11434/v1",
        ),
        (
            ConnectionRefusedError(111, "refused"),
            "http://[::1]:8000/v1",
            "connection refused: http://[::1]:8000/v1",
        ),
        # a remote host refusing may be restarting: waited out
        (ConnectionRefusedError(111, "refused"), "https://api.example.com/v1", None),
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "https://k:s@api.exmaple.com/v1",
            "unknown host: https://api.exmaple.com/v1",
        ),
        # a resolver that did not answer in time: waited out
        (
            socket.gaierror(socket.EAI_AGAIN, "Temporary failure"),
            "https://api.example.com/v1",
            None,
        ),
        (TimeoutError("timed out"), "http://127.0.0.1:1/v1", None),
    ],
)
def test_hopeless(cause: BaseException, url: str, expected: str | None) -> None:
    assert hopeless(_connect_error(cause), url) == expected


def test_shown_url_drops_credentials() -> None:
    assert shown_url("http://u:p@host:8/v1") == "http://host:8/v1"
    assert shown_url("http://host/v1") == "http://host/v1"


def test_nested_cause() -> None:
    assert nested_cause({"message": "x"}) is None
    assert nested_cause({"metadata": {"raw": "upstream\n timed   out"}}) == "upstream timed out"
    assert nested_cause({"metadata": {"raw": {"message": "bad"}, "provider_name": "Groq"}}) == (
        "Groq says: bad"
    )

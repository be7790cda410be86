"""Reading an HTTP/1.1 reply (claw_batch/llm/httpreply.py): the head, each body framing, and
what is refused."""

from __future__ import annotations

import io

import pytest

from claw_batch.llm import httpreply
from claw_batch.llm.httpreply import MAX_HEADERS, BadReply, HttpReply, ShortReply


def reply(raw: bytes) -> HttpReply:
    return HttpReply(io.BufferedReader(io.BytesIO(raw)))  # type: ignore[arg-type]


def test_a_reply_with_a_length_keeps_its_connection_and_its_headers_in_any_case() -> None:
    r = reply(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Id: 1\r\nx-id: 2\r\n"
        b'Content-Length: 7\r\n\r\n{"a":1}NEXT'
    )
    assert r.status == 200
    assert r.headers["content-type"] == "application/json"
    assert r.headers.get("CONTENT-TYPE") == "application/json"
    assert r.headers.get("x-id") == "1"  # a repeated header: its first value
    assert r.read() == b'{"a":1}'  # and not a byte of what follows it
    assert not r.will_close


def test_a_chunked_stream_read_line_by_line_across_its_chunks() -> None:
    body = b"6;ext=1\r\ndata: \r\n9\r\n{}\n\ndata:\r\n" + b"9\r\n [DONE]\n\n\r\n0\r\nX-T: 1\r\n\r\n"
    r = reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + body + b"NEXT")
    assert list(r.lines()) == [b"data: {}\n", b"\n", b"data: [DONE]\n", b"\n"]
    assert not r.will_close


def test_a_reply_without_a_length_ends_with_its_connection() -> None:
    r = reply(b"HTTP/1.1 200 OK\r\n\r\nall of it\nand the rest")
    assert r.will_close
    assert list(r.lines()) == [b"all of it\n", b"and the rest"]


@pytest.mark.parametrize(
    ("head", "closes"),
    [
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n", True),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n", False),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n", True),
        (b"HTTP/1.1 204 No Content\r\n", False),
    ],
)
def test_whether_the_connection_carries_another_request(head: bytes, closes: bool) -> None:
    r = reply(head + b"\r\n")
    assert r.read() == b""
    assert r.will_close is closes


def test_an_interim_reply_is_passed_over() -> None:
    r = reply(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many\r\nContent-Length: 2\r\n\r\nno")
    assert (r.status, r.read()) == (429, b"no")


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"", ShortReply),  # closed without a word
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", BadReply),
        (b"HTTP/1.1 2000 OK\r\n\r\n", BadReply),
        (b"HTTP/1.1 abc OK\r\n\r\n", BadReply),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", BadReply),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", BadReply),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", BadReply),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n0123456789", BadReply),
        (b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n01234", BadReply),
        (b"HTTP/1.1 200 " + b"x" * 65536 + b"Content-Length: 3\r\n\r\nabc", BadReply),
        (b"HTTP/1.1 200 OK\r\nContent-Le", ShortReply),
        (b"HTTP/1.1 200 OK\r\n" + b"X: 1\r\n" * (MAX_HEADERS + 1) + b"\r\n", BadReply),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n", BadReply),
    ],
)
def test_what_is_not_a_reply_is_refused(raw: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        reply(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        # A negative size would read to the connection's end; a huge one allocate it at once.
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n" + b"x" * 100,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nxx",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x10\r\n" + b"x" * 16,
    ],
)
def test_a_body_cut_short_or_garbled_is_an_error_not_an_answer(raw: bytes) -> None:
    with pytest.raises((ShortReply, BadReply)):
        reply(raw).read()


def test_a_body_larger_than_any_reply_is_refused_as_it_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(httpreply, "MAX_BODY", 1000)
    endless = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"100\r\n" + b"x" * 256
    with pytest.raises(BadReply, match="larger than"):
        reply(endless + b"\r\n" + (b"100\r\n" + b"x" * 256 + b"\r\n") * 10).read()


def test_a_line_that_spans_many_pieces_comes_whole() -> None:
    body = b"data: " + b"x" * (3 * httpreply.PIECE) + b"\n\nlast"
    r = reply(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert list(r.lines()) == [body[: 3 * httpreply.PIECE + 7], b"\n", b"last"]

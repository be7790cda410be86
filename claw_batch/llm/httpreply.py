"""An HTTP/1.1 reply read off a connection: its status line, its headers, and its body by the
framing the headers give (Content-Length, chunked, or to the end of the connection).

What `http.client.HTTPResponse` does for claw, without it: its head is parsed by the `email`
package (~75 µs a reply, a twentieth of what claw spent a model turn; and ~10 ms of imports
before a first reply). Malformed replies raise `BadReply` (a ValueError), a reply cut short
`ShortReply`; `transport` says both as connection errors.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping

MAX_LINE = 65536  # bytes of a status, header or chunk-size line, as http.client allows
MAX_HEADERS = 100  # as http.client allows
PIECE = 65536  # bytes read at a time
MAX_BODY = 64 * 2**20  # bytes of a body: a chat completion is a few KB, a long stream a few MB
NUMBER = re.compile(rb"[0-9]{1,18}")  # a Content-Length
HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")  # a chunk's size
NO_BODY = (204, 304)  # statuses whose replies never have a body (nor do 1xx)


class BadReply(ValueError):
    """What came back is not an HTTP/1.x reply."""


class ShortReply(ConnectionError):
    """The connection ended before the reply did."""


class Headers(Mapping[str, str]):
    """A reply's headers, looked up by name in any case; a repeated one keeps its first value
    (as `http.client`'s `msg.get` gives it)."""

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields  # by lower-case name

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


class HttpReply:
    """One reply on `fp` (a buffered reader of the connection): `status` and `headers` once
    made, the body by `read` or `pieces`, and whether the connection can carry another
    request after it (`will_close`)."""

    def __init__(self, fp: io.BufferedReader) -> None:
        self._fp = fp
        version, self.status = _status(fp)
        while 100 <= self.status < 200:  # 100 Continue and the like: a head, then the reply
            _fields(fp)
            version, self.status = _status(fp)
        fields = _fields(fp)
        self.headers = Headers(fields)
        codings = fields.get("transfer-encoding", "").lower()
        self._chunked = codings.rsplit(",", 1)[-1].strip() == "chunked"
        self._left: int | None = None  # body bytes still to read when the length is known
        self._body: Iterator[bytes] | None = None
        if self.status in NO_BODY:
            self._left = 0
        elif not self._chunked and "content-length" in fields:
            length = fields["content-length"].encode("latin-1")
            if not NUMBER.fullmatch(length):
                raise BadReply(f"bad Content-Length: {length[:40]!r}")
            self._left = int(length)
        connection = fields.get("connection", "").lower()
        self.will_close = (
            "close" in connection
            or (version == "HTTP/1.0" and "keep-alive" not in connection)
            or (self._left is None and not self._chunked)  # its end is the connection's end
        )

    def read(self) -> bytes:
        return b"".join(self.pieces())

    def pieces(self) -> Iterator[bytes]:
        """The rest of the body, in pieces as they arrive: one iterator for the reply, so a
        reader that stopped (a stream at its `[DONE]`) is followed where it stopped."""
        if self._body is None:
            self._body = self._checked()
        return self._body

    def _checked(self) -> Iterator[bytes]:
        """BadReply past MAX_BODY bytes."""
        read = 0
        for piece in self._framed():
            read += len(piece)
            if read > MAX_BODY:
                raise BadReply(f"the reply's body is larger than {MAX_BODY // 2**20} MB")
            yield piece

    def _framed(self) -> Iterator[bytes]:
        if self._chunked:
            yield from self._chunks()
        elif self._left is None:
            while piece := self._fp.read1(PIECE):
                yield piece
        else:
            yield from self._exactly(self._left)
            self._left = 0

    def _exactly(self, size: int) -> Iterator[bytes]:
        while size:
            piece = self._fp.read1(min(size, PIECE))
            if not piece:
                raise ShortReply(f"the reply ended {size} bytes short")
            size -= len(piece)
            yield piece

    def lines(self) -> Iterator[bytes]:
        """The body line by line, each with its line ending (the last may have none)."""
        partial: list[bytes] = []  # a line's pieces before its end
        for piece in self.pieces():
            start = 0
            while (end := piece.find(b"\n", start)) >= 0:
                yield b"".join([*partial, piece[start : end + 1]])
                partial.clear()
                start = end + 1
            if start < len(piece):
                partial.append(piece[start:])
        if partial:
            yield b"".join(partial)

    def _chunks(self) -> Iterator[bytes]:
        while True:
            line = _line(self._fp)
            digits = line.split(b";", 1)[0].strip()
            if not HEX.fullmatch(digits):
                raise BadReply(f"bad chunk size: {line[:40]!r}")
            size = int(digits, 16)
            if size == 0:
                _fields(self._fp)  # the trailer, up to its empty line
                return
            yield from self._exactly(size)
            _line(self._fp)  # the chunk's CRLF


def _status(fp: io.BufferedReader) -> tuple[str, int]:
    if not fp.peek(1):
        raise ShortReply("the server closed the connection without replying")
    line = _line(fp)
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3:
        raise BadReply(f"not an HTTP/1.x status line: {line[:80]!r}")
    try:
        return parts[0].decode("ascii"), int(parts[1])
    except ValueError:
        raise BadReply(f"bad status: {parts[1]!r}") from None


def _fields(fp: io.BufferedReader) -> dict[str, str]:
    """Header lines up to the empty line, by lower-case name."""
    fields: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = _line(fp)
        if line in (b"\r\n", b"\n"):
            return fields
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon:
            raise BadReply(f"bad header line: {line[:80]!r}")
        fields.setdefault(name.strip().lower(), value.strip())
    raise BadReply(f"more than {MAX_HEADERS} headers")


def _line(fp: io.BufferedReader) -> bytes:
    line = fp.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise BadReply("a line of the reply is too long")
    if not line.endswith(b"\n"):
        raise ShortReply("the reply ended inside its head")
    return line

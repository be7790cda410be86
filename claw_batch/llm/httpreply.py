"""An HTTP/1.1 reply read off a connection: its status line, its headers, and its body by the
framing the headers give (Content-Length, chunked, or to the end of the connection).

What `http.client.HTTPResponse` does for claw, without it: its head is parsed by the `email`
package (~75 µs a reply, a twentieth of what claw spent a model turn; and ~10 ms of imports
before a first reply). Malformed replies raise `BadReply` (a ValueError), a reply cut short
`ShortReply`; `transport` says both as connection errors.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping

MAX_LINE = 65536  # bytes of a status, header or chunk-size line, as http.client allows
MAX_HEADERS = 100  # as http.client allows
PIECE = 65536  # bytes read at a time from a body whose end is not known yet
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
        if self.status in NO_BODY:
            self._left = 0
        elif not self._chunked and "content-length" in fields:
            try:
                self._left = int(fields["content-length"])
            except ValueError:
                raise BadReply(f"bad Content-Length: {fields['content-length']!r}") from None
            if self._left < 0:
                raise BadReply(f"bad Content-Length: {self._left}")
        connection = fields.get("connection", "").lower()
        self.will_close = (
            "close" in connection
            or (version == "HTTP/1.0" and "keep-alive" not in connection)
            or (self._left is None and not self._chunked)  # its end is the connection's end
        )

    def read(self) -> bytes:
        return b"".join(self.pieces())

    def pieces(self) -> Iterator[bytes]:
        """The body, in pieces as they arrive."""
        if self._chunked:
            yield from self._chunks()
        elif self._left is None:
            while piece := self._fp.read1(PIECE):
                yield piece
        else:
            while self._left:
                piece = self._fp.read1(min(self._left, PIECE))
                if not piece:
                    raise ShortReply(f"the reply ended {self._left} bytes short")
                self._left -= len(piece)
                yield piece

    def lines(self) -> Iterator[bytes]:
        """The body line by line, each with its line ending (the last may have none)."""
        rest = b""
        for piece in self.pieces():
            rest += piece
            start = 0
            while (end := rest.find(b"\n", start)) >= 0:
                yield rest[start : end + 1]
                start = end + 1
            rest = rest[start:]
        if rest:
            yield rest

    def _chunks(self) -> Iterator[bytes]:
        while True:
            line = _line(self._fp)
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise BadReply(f"bad chunk size: {line[:40]!r}") from None
            if size == 0:
                _fields(self._fp)  # the trailer, up to its empty line
                return
            data = self._fp.read(size)
            if len(data) < size:
                raise ShortReply("the reply ended inside a chunk")
            _line(self._fp)  # the chunk's CRLF
            yield data


def _status(fp: io.BufferedReader) -> tuple[str, int]:
    line = fp.readline(MAX_LINE + 1)
    if not line:
        raise ShortReply("the server closed the connection without replying")
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

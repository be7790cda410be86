"""claw's own HTTP/1.1 client for one endpoint: POST a body, read the reply.

What a chat-completions call needs and nothing else: a pool of keep-alive connections shared
by every job that calls the endpoint, the request's head computed once (only its length
changes), the reply read by `httpreply` from `interruptible`'s sockets, so that the job's
deadline and Ctrl-C end any wait. A connection taken from the pool that fails before a byte
of the reply comes back (the server closed it while it was idle) is replaced and the request
sent once more, as httpx does; no request is ever sent twice otherwise.

Failures are `failures.ConnectionFailure`s with the SDK's words ("Connection error.",
"Request timed out."), the cause chained for `failures.hopeless`.
"""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
import weakref
from collections.abc import Iterator, Mapping
from types import TracebackType
from urllib.parse import urlsplit

from claw_batch import startup
from claw_batch.llm import interruptible
from claw_batch.llm.failures import CONNECTION_ERROR, TIMED_OUT, ConnectionFailure
from claw_batch.llm.httpreply import HttpReply

MAX_IDLE = 100  # connections kept open for later calls (httpx's keep-alive default)
FINISH = 0.01  # seconds to wait for the rest of a body nobody needs, to reuse its connection


class _Connection:
    """One socket to the endpoint, and how much of the current reply came in on it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reused = False
        self.received = 0  # bytes of the current reply
        self.read_timeout: float | None = None

    def reader(self) -> io.BufferedReader:
        """What a reply is read from (one per reply: its buffer is the reply's)."""
        return io.BufferedReader(_Reader(self))

    def close(self) -> None:
        self.sock.close()


class _Reader(io.RawIOBase):
    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self._first = True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        connection = self._connection
        n = interruptible.recv_into(
            connection.sock, buffer, connection.read_timeout, wait_first=self._first
        )
        self._first = False
        connection.received += n
        return n


class Reply:
    """A reply whose head has been read; use it in a `with` block and read its body once."""

    def __init__(self, pool: Pool, connection: _Connection, response: HttpReply):
        self._pool = pool
        self._connection: _Connection | None = connection
        self._response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers  # looked up in any case
        self._whole = False  # the body was read to its end

    def read(self) -> bytes:
        with _failures():
            body = self._response.read()
        self._whole = True
        return body

    def lines(self) -> Iterator[bytes]:
        """The body line by line, each with its line ending."""
        with _failures():
            yield from self._response.lines()
        self._whole = True

    def __enter__(self) -> Reply:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            if kind is None and not self._whole and not self._response.will_close:
                self._finish(connection)
        finally:
            if self._whole and not self._response.will_close:
                self._pool.release(connection)
            else:  # not read to its end, or the server closes it: never reused
                connection.close()

    def _finish(self, connection: _Connection) -> None:
        """Read what is left of a body whose reader stopped early (a stream's `[DONE]` comes
        just before the end of its body) if it is there already: the connection can then
        be reused. A server that keeps the body open costs a short wait, not a hang."""
        connection.read_timeout = FINISH
        with contextlib.suppress(ConnectionFailure):
            self.read()


class Pool:
    """The endpoint at `url`, and its idle connections."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._tls else 80)
        host = parts.netloc.rpartition("@")[2]  # never the credentials a URL may carry
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [f"POST {target} HTTP/1.1", f"Host: {host}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        self._head = ("\r\n".join(head) + "\r\nContent-Length: ").encode("latin-1")
        self._context: ssl.SSLContext | None = None
        self._idle: list[_Connection] = []  # list.pop and .append are atomic: no lock
        # When the pool goes, so do its sockets: before they are finalized themselves (and
        # warn that nobody closed them) when the pool was part of a reference cycle.
        weakref.finalize(self, _close, self._idle)

    def post(self, body: bytes, *, read_timeout: float, connect_timeout: float) -> Reply:
        request = b"%s%d\r\n\r\n%s" % (self._head, len(body), body)
        connection = self._take(connect_timeout)
        try:
            return self._exchange(connection, request, read_timeout)
        except ConnectionFailure as exc:
            timed_out = isinstance(exc.__cause__, TimeoutError)
            if timed_out or not connection.reused or connection.received:
                raise
        # Closed by the server while idle: the request never reached it.
        return self._exchange(self._connect(connect_timeout), request, read_timeout)

    def release(self, connection: _Connection) -> None:
        if len(self._idle) < MAX_IDLE:
            connection.reused = True
            self._idle.append(connection)
        else:
            connection.close()

    def close(self) -> None:
        """Close the idle connections (a reply still being read closes its own)."""
        _close(self._idle)

    def _take(self, connect_timeout: float) -> _Connection:
        try:
            return self._idle.pop()
        except IndexError:
            return self._connect(connect_timeout)

    def _exchange(self, connection: _Connection, request: bytes, read_timeout: float) -> Reply:
        connection.received = 0
        connection.read_timeout = read_timeout
        try:
            with _failures():
                interruptible.send_all(connection.sock, request, read_timeout)
                startup.request_left()
                response = HttpReply(connection.reader())
        except BaseException:
            connection.close()
            raise
        return Reply(self, connection, response)

    def _connect(self, timeout: float) -> _Connection:
        with _failures():
            return _Connection(interruptible.connect(lambda: self._open(timeout)))

    def _open(self, timeout: float) -> socket.socket:
        """On a call thread: TCP, and TLS over it, with the blocking calls they need."""
        # An ASCII name as bytes (getaddrinfo takes either): a str is IDNA-encoded, and the
        # codec's import (~1 ms) would come before the first request.
        host = self._host.encode() if self._host.isascii() else self._host
        sock = socket.create_connection((host, self._port), timeout)  # type: ignore[arg-type]
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls:
                if self._context is None:  # two threads may make one each: either serves
                    self._context = ssl.create_default_context()
                sock = self._context.wrap_socket(sock, server_hostname=self._host)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock


def _close(idle: list[_Connection]) -> None:
    while idle:
        try:
            connection = idle.pop()
        except IndexError:  # taken meanwhile
            return
        connection.close()


class _failures:
    """What goes wrong on the wire, as a ConnectionFailure with its cause."""

    def __enter__(self) -> None:
        pass

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, TimeoutError):
            raise ConnectionFailure(TIMED_OUT) from exc
        if isinstance(exc, (OSError, ValueError)):  # httpreply's BadReply is a ValueError
            raise ConnectionFailure(CONNECTION_ERROR) from exc

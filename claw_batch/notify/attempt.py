"""One attempt at a delivery: how it failed (`Miss`), and the deadline that cuts it whole."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl


@dataclass(frozen=True)
class Miss:
    """An attempt that did not deliver. `final`: another attempt cannot help (a 404, a
    refused login, a program not found); `wait`: what the server asked (Retry-After)."""

    error: str
    final: bool = False
    wait: float | None = None


def seconds(value: float) -> str:
    """`10 s`, `0.5 s`."""
    return f"{value:g} s"


class Deadline:
    """Shuts a connection's socket down when the attempt's time is up. A socket's timeout
    bounds each read, not the exchange: a server that answers a byte at a time would hold
    an attempt for as long as it likes. The socket is watched through a duplicate of its
    descriptor (a shutdown acts on the connection, whichever descriptor it is made on):
    wrapping it in TLS, which detaches the original, leaves it watched, the handshake
    included."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.fired = False
        self._end = time.monotonic() + limit
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(limit, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._timer.cancel()
        self._timer.join()  # no shutdown after this: the caller closes the socket next
        self._keep(None)

    @property
    def passed(self) -> bool:
        """Whether the attempt's time is up: a socket's own timeout (which smtplib reports as
        a disconnection) may beat the timer to it."""
        return self.fired or time.monotonic() >= self._end

    def watch(self, sock: socket.socket | None) -> None:
        """The connection to shut down, as soon as it is made: before anything is read."""
        copy = None
        if sock is not None and sock.fileno() != -1:
            copy = socket.socket(fileno=os.dup(sock.fileno()))
        self._keep(copy)
        if time.monotonic() >= self._end:
            self._fire()

    def _keep(self, copy: socket.socket | None) -> None:
        with self._lock:
            old, self._sock = self._sock, copy
        if old is not None:
            old.close()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)


def connect(
    host: str,
    port: int,
    timeout: float,
    deadline: Deadline,
    context: ssl.SSLContext | None,
) -> socket.socket:
    """A socket connected to `host`, the deadline's before a byte is read from it; with
    `context`, wrapped in TLS whose handshake runs once it is watched: a server that stalls
    the greeting or the handshake is cut with the rest of the attempt."""
    sock = socket.create_connection((host, port), timeout)
    deadline.watch(sock)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if context is None:
        return sock
    try:
        tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    except BaseException:
        sock.close()
        raise
    try:
        tls.do_handshake()
    except BaseException:
        tls.close()
        raise
    return tls

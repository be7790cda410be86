"""interruptible.Stream: what the SDK's HTTP client writes, as the endpoint receives it."""

from __future__ import annotations

import socket
from typing import Any

import httpcore2

from claw_batch.llm.interruptible import Stream


class _Inner(httpcore2.NetworkStream):
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, info: str) -> Any:
        return self.sock if info == "socket" else None

    def close(self) -> None:
        self.sock.close()


def test_a_request_head_and_body_go_out_together_before_the_reply_is_read() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        stream = Stream(_Inner(ours))
        stream.write(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n", timeout=5)
        stream.write(b"body", timeout=5)
        stream.write(b"", timeout=5)  # h11's end of message, for a body of known length
        theirs.setblocking(False)
        try:
            early = theirs.recv(100)
        except BlockingIOError:
            early = b""
        assert early == b""  # nothing sent yet
        theirs.sendall(b"HTTP/1.1 200 OK\r\n")
        assert stream.read(100, timeout=5) == b"HTTP/1.1 200 OK\r\n"
        theirs.setblocking(True)
        assert theirs.recv(100) == b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody"


def test_an_idle_connection_closed_by_the_server_is_readable() -> None:
    """What httpcore asks of an idle pooled connection before it reuses it."""
    ours, theirs = socket.socketpair()
    with ours:
        stream = Stream(_Inner(ours))
        assert stream.get_extra_info("is_readable") is False
        theirs.close()
        assert stream.get_extra_info("is_readable") is True

"""interruptible.Stream: what the SDK's HTTP client writes, as the endpoint receives it."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpcore2
import pytest
from helpers import NOT_HELD_UP, since

from claw_batch import cancel
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


@pytest.mark.skipif(shutil.which("openssl") is None, reason="makes its certificate with openssl")
def test_a_tls_stream_reads_and_writes_without_blocking(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    request = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    names = ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"]
    subprocess.run([*request, *names], check=True, capture_output=True)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    ours, theirs = socket.socketpair()
    received: list[bytes] = []
    reply = b"HTTP/1.1 200 OK\r\n" + b"x" * 50_000 + b"end"

    def endpoint() -> None:
        with server_ctx.wrap_socket(theirs, server_side=True) as tls:
            data = b""
            while not data.endswith(b"body"):
                data += tls.recv(100)
            received.append(data)
            tls.sendall(reply)

    thread = threading.Thread(target=endpoint)
    thread.start()
    with client_ctx.wrap_socket(ours, server_hostname="localhost") as tls:
        stream = Stream(_Inner(tls))
        stream.write(b"POST / HTTP/1.1\r\n\r\n", timeout=5)
        stream.write(b"body", timeout=5)
        got = b""
        while len(got) < len(reply):
            got += stream.read(65536, timeout=5)
    thread.join()
    assert received == [b"POST / HTTP/1.1\r\n\r\nbody"]
    assert got == reply


def test_ctrl_c_ends_a_wait_that_has_no_deadline_and_the_next_run_waits_again() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        stream = Stream(_Inner(ours))
        timer = threading.Timer(0.2, cancel.cancel)
        timer.start()
        started = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                stream.read(100)  # nothing comes, and no timeout: only Ctrl-C ends it
        finally:
            cancel.reset()  # a new run, while the cancel pipe may still say cancelled
        assert since(started) < NOT_HELD_UP  # seen between short polls, not after a long wait
        threading.Timer(0.3, theirs.sendall, (b"late",)).start()
        assert stream.read(100, timeout=5) == b"late"

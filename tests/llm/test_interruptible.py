"""interruptible: socket waits that end at the deadline, on Ctrl-C, or after a timeout."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import NOT_HELD_UP, since

from claw_batch import cancel
from claw_batch.errors import LimitExceeded
from claw_batch.llm import interruptible
from claw_batch.llm.interruptible import TIMEOUT, recv_into, send_all


def received(sock: socket.socket, size: int = 100, timeout: float | None = 5) -> bytes:
    buffer = bytearray(size)
    n = recv_into(sock, memoryview(buffer), timeout)
    return bytes(buffer[:n])


def pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    return ours, theirs


def test_sends_all_and_reads_what_came() -> None:
    ours, theirs = pair()
    data = b"x" * 1_000_000  # more than a socket buffer holds: sent in several waits
    got = bytearray()

    def endpoint() -> None:
        while len(got) < len(data):
            got.extend(theirs.recv(65536))

    with ours, theirs:
        reader = threading.Thread(target=endpoint)
        reader.start()
        send_all(ours, data, timeout=5)
        reader.join()
        assert bytes(got) == data
        theirs.sendall(b"reply")
        assert received(ours) == b"reply"


def test_a_wait_longer_than_its_timeout_is_a_timeout_error() -> None:
    ours, theirs = pair()
    with ours, theirs, pytest.raises(TimeoutError):
        received(ours, timeout=0.2)


def test_the_deadline_ends_a_wait_that_has_no_timeout() -> None:
    ours, theirs = pair()
    started = time.monotonic()
    with (
        ours,
        theirs,
        interruptible.deadline(time.monotonic() + 0.3),
        pytest.raises(LimitExceeded) as exc,
    ):
        received(ours, timeout=None)
    assert str(exc.value) == TIMEOUT
    assert since(started) < NOT_HELD_UP


@pytest.mark.skipif(shutil.which("openssl") is None, reason="makes its certificate with openssl")
def test_a_tls_socket_reads_and_writes_without_blocking(tmp_path: Path) -> None:
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
    got_request: list[bytes] = []
    reply = b"HTTP/1.1 200 OK\r\n" + b"x" * 50_000 + b"end"

    def endpoint() -> None:
        with server_ctx.wrap_socket(theirs, server_side=True) as tls:
            data = b""
            while not data.endswith(b"body"):
                data += tls.recv(100)
            got_request.append(data)
            tls.sendall(reply)

    thread = threading.Thread(target=endpoint)
    thread.start()
    with client_ctx.wrap_socket(ours, server_hostname="localhost") as tls:
        tls.setblocking(False)
        send_all(tls, b"POST / HTTP/1.1\r\n\r\nbody", timeout=5)
        got = b""
        while len(got) < len(reply):
            got += received(tls, 65536)
    thread.join()
    assert got_request == [b"POST / HTTP/1.1\r\n\r\nbody"]
    assert got == reply


def test_ctrl_c_ends_a_wait_that_has_no_deadline_and_the_next_run_waits_again() -> None:
    ours, theirs = pair()
    with ours, theirs:
        timer = threading.Timer(0.2, cancel.cancel)
        timer.start()
        started = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                received(ours, timeout=None)  # nothing comes, and no timeout: only Ctrl-C
        finally:
            cancel.reset()  # a new run, while the cancel pipe may still say cancelled
        assert since(started) < NOT_HELD_UP  # seen between short polls, not after a long wait
        threading.Timer(0.3, theirs.sendall, (b"late",)).start()
        assert received(ours) == b"late"


def test_a_connection_made_after_the_deadline_is_closed() -> None:
    made: list[socket.socket] = []
    go = threading.Event()

    def slow_connect() -> socket.socket:
        go.wait(5)
        ours, theirs = socket.socketpair()
        theirs.close()
        made.append(ours)
        return ours

    with interruptible.deadline(time.monotonic() + 0.2), pytest.raises(LimitExceeded):
        interruptible.connect(slow_connect)
    go.set()
    for _ in range(100):
        if made and made[0].fileno() == -1:
            break
        time.sleep(0.05)
    assert made[0].fileno() == -1  # closed, not left open on a thread nobody waits for

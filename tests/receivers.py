"""Real servers on 127.0.0.1 that deliveries are sent to (claw_batch.notify): an HTTP receiver
that records every request and answers as scripted, an SMTP server (aiosmtpd) that records
every message, and a listener that accepts and never answers (a hung webhook or SMTP server).

    with HttpReceiver([500, 200]) as hook:   # the first POST gets 500, the next 200
        ... hook.url("/services/T0/B0/secret") ... hook.requests[0].body
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import ssl
import subprocess
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

HANG = "hang"  # accept, read the request, never answer
CLOSE = "close"  # accept and close at once
Answer = int | str | tuple[int, dict[str, str], bytes]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class HttpReceiver:
    """An HTTP server on a thread. `answers` are used in turn, the last one repeated: a
    status, (status, headers, body), HANG or CLOSE."""

    def __init__(self, answers: Sequence[Answer] = (200,)) -> None:
        self.answers = list(answers)
        self.requests: list[Request] = []
        self.released = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                answer = receiver.answers[min(len(receiver.requests), len(receiver.answers) - 1)]
                if answer == CLOSE:
                    receiver.requests.append(Request("POST", self.path, dict(self.headers), b""))
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.requests.append(Request("POST", self.path, dict(self.headers), body))
                if answer == HANG:
                    receiver.released.wait(30)
                    return
                status, headers, text = answer if isinstance(answer, tuple) else (answer, {}, b"")
                self.send_response(int(status))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> HttpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class Silent:
    """A TCP listener that accepts connections and never says a word."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.accepted.append(self.sock.accept()[0])

    def __enter__(self) -> Silent:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join()
        for conn in self.accepted:
            conn.close()


class Trickle:
    """A TCP listener that, on each connection, sends `head` and then `drip` again and again,
    every 0.2 s, until it is stopped: each read gets bytes well within any socket timeout,
    and what it sends never ends (an SMTP greeting of endless `220-` lines; a TLS record
    that never completes, so the handshake never does)."""

    def __init__(self, drip: bytes, head: bytes = b"") -> None:
        self.head, self.drip = head, drip
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn = self.sock.accept()[0]
                talk = threading.Thread(target=self._talk, args=(conn,), daemon=True)
                self.threads.append(talk)
                talk.start()

    def _talk(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.sendall(self.head)
            while not self.stop.wait(0.2):
                conn.sendall(self.drip)

    def __enter__(self) -> Trickle:
        self.threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for thread in list(self.threads):
            thread.join()


# A TLS handshake record header announcing 16 KB that then come a byte at a time.
TLS_RECORD = b"\x16\x03\x03\x40\x00"


def within(seconds: float, fn: Callable[[], T]) -> T:
    """`fn()`, run on a thread; fails the test if it has not returned after `seconds` (a
    bound on a hang, far above the timeout under test, never a measure of speed)."""
    got: list[T] = []
    worker = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert got, f"still running after {seconds} s"
    return got[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Mail:
    mail_from: str
    rcpt_tos: list[str]
    content: bytes


@dataclass
class SmtpServer:
    """aiosmtpd on a thread, recording each message. `login`: the one (user, password) it
    takes (AUTH over plain text, as a test server may); `tls`: (cert, key) for STARTTLS."""

    login: tuple[str, str] | None = None
    tls: tuple[Path, Path] | None = None
    mails: list[Mail] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    port: int = 0

    def __enter__(self) -> SmtpServer:
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult

        server = self

        class Handler:
            async def handle_DATA(self, srv: Any, session: Any, envelope: Any) -> str:
                server.mails.append(
                    Mail(envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content)
                )
                return "250 OK"

        def authenticate(
            srv: Any, session: Any, envelope: Any, mechanism: str, data: Any
        ) -> AuthResult:
            user, password = data.login.decode(), data.password.decode()
            server.logins.append(user)
            return AuthResult(success=(user, password) == self.login, handled=False)

        options: dict[str, Any] = {}
        if self.login is not None:
            options |= {"authenticator": authenticate, "auth_require_tls": self.tls is not None}
        if self.tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.tls)
            options |= {"tls_context": context, "require_starttls": True}
        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Requiring AUTH while not requiring TLS…"
            self.controller.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.controller.stop()


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key

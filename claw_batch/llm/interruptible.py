"""Socket I/O for model calls that gives up at the job's deadline and on Ctrl-C.

A model call runs on the job's own thread: handing it to another thread and waiting there
costs two more GIL hand-overs per call, ~14 % of claw's CPU at -j 32 (bench/parallel.py,
zero latency). What the
other thread bought is kept here, one level down: this network backend for the SDK's HTTP
client (httpx2 over httpcore2) cuts every blocking read and write into waits of at most
`cancel.POLL` seconds and checks, between them, the run's cancel flag and the deadline the
adapter set for the calling thread. A hung endpoint, or one that trickles its reply, cannot
keep a call past the deadline, and Ctrl-C ends it within a poll. Connecting (DNS, TCP, TLS:
once per connection with keep-alive) cannot be cut up like that; it runs on a call thread
(`callthreads`) that the job waits for the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import httpcore2

from claw_batch import cancel
from claw_batch.llm.callthreads import CallThreads

T = TypeVar("T")
DEADLINE = "the job's deadline passed"

_local = threading.local()  # .deadline: time.monotonic() by which the thread's call must end
_connects = CallThreads("claw-model-connect")


@contextlib.contextmanager
def deadline(at: float) -> Iterator[None]:
    """Calls made by this thread inside the block end by `at` (time.monotonic())."""
    _local.deadline = at
    try:
        yield
    finally:
        _local.deadline = None


def _left(timeout_error: type[Exception]) -> float | None:
    """Seconds to the calling thread's deadline; raises on cancel or once it passed."""
    cancel.check()
    at: float | None = getattr(_local, "deadline", None)
    if at is None:
        return None
    left = at - time.monotonic()
    if left <= 0:
        raise timeout_error(DEADLINE)
    return left


def _sliced(
    op: Callable[[], T],
    sock: socket.socket,
    timeout: float | None,
    timeout_error: type[Exception],
    error: type[Exception],
    *,
    events: int,
    wait_first: bool = False,
) -> T:
    """`op` on the non-blocking `sock` within `timeout` (httpcore's per-operation timeout).

    The operation is tried at once: a socket with a timeout would poll before every send and
    recv, a second system call (and GIL hand-over) when the socket is ready anyway, as it is
    to send a request or to read the rest of a reply. When it would block, the wait is cut
    into polls of at most `cancel.POLL` seconds; `wait_first` starts with one (the first read
    after a request: its reply cannot be there yet).
    """
    give_up = None if timeout is None else time.monotonic() + timeout
    ready = not wait_first
    while True:
        want = events
        if ready:
            try:
                return op()
            except ssl.SSLWantWriteError:  # TLS may need to write to go on reading
                want = select.POLLOUT
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
            except OSError as exc:
                raise error(str(exc)) from exc
        wait = cancel.POLL
        left = _left(timeout_error)
        if left is not None:
            wait = min(wait, left)
        if give_up is not None:
            until = give_up - time.monotonic()
            if until <= 0:
                raise timeout_error("timed out")
            wait = min(wait, until)
        poller = select.poll()
        try:
            poller.register(sock, want)
        except ValueError as exc:  # closed meanwhile: no file descriptor left
            raise error(str(exc)) from exc
        ready = bool(poller.poll(wait * 1000))


def _on_a_call_thread(fn: Callable[[], httpcore2.NetworkStream]) -> httpcore2.NetworkStream:
    """Connect on another thread, waiting as `_sliced` does; a connection made after the
    wait was given up is closed."""
    lock = threading.Lock()
    given_up = False
    made: list[httpcore2.NetworkStream] = []

    def connect() -> httpcore2.NetworkStream:
        stream = fn()
        with lock:
            if given_up:
                stream.close()
            else:
                made.append(stream)
        return stream

    call = _connects.submit(connect)
    try:
        while True:
            left = _left(httpcore2.ConnectTimeout)
            if call.wait(cancel.POLL if left is None else min(left, cancel.POLL)):
                return call.result()
    except BaseException:
        with lock:
            given_up = True
            for stream in made:  # connected after all, but too late
                stream.close()
        raise


def _libc_poll() -> Callable[..., int] | None:
    """libc's poll(2), called without releasing the GIL (ctypes.PyDLL); None off POSIX."""
    if sys.platform == "win32":
        return None
    try:
        fn = ctypes.PyDLL(None).poll
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int)
    fn.restype = ctypes.c_int
    poll: Callable[..., int] = fn
    return poll


class _PollFd(ctypes.Structure):
    _fields_ = (("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short))


_poll = _libc_poll()


def _readable(sock: socket.socket) -> bool:
    """httpcore's is_socket_readable (has an idle connection been closed by the server?) with
    the GIL held. httpcore asks it of every idle connection in the pool twice a request: at
    -j 32 some twenty polls a request, each of which would hand the GIL to another job. With
    a zero timeout the call never blocks, so holding the GIL through it costs nothing."""
    fd = sock.fileno()
    if fd < 0 or _poll is None:
        return True
    pollfd = _PollFd(fd, select.POLLIN, 0)
    return _poll(ctypes.byref(pollfd), 1, 0) != 0


class Stream(httpcore2.NetworkStream):
    """httpcore writes a request's head and its body separately, then reads the reply: the
    writes are kept and sent together before the first read, in one system call (and one
    packet) where two would hand the GIL over twice."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner
        self._sock: socket.socket = inner.get_extra_info("socket")
        self._sock.setblocking(False)  # see _sliced
        self._unsent: list[bytes] = []
        self._write_timeout: float | None = None
        self._sent = False  # a request went out that no read has followed yet

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._unsent:
            self._send()
        # Decrypted bytes a TLS socket holds already are not seen by poll.
        wait = self._sent and not (isinstance(self._sock, ssl.SSLSocket) and self._sock.pending())
        self._sent = False
        return _sliced(
            functools.partial(self._sock.recv, max_bytes),
            self._sock,
            timeout,
            httpcore2.ReadTimeout,
            httpcore2.ReadError,
            events=select.POLLIN,
            wait_first=wait,
        )

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._unsent.append(bytes(buffer))
            self._write_timeout = timeout

    def _send(self) -> None:
        view = memoryview(b"".join(self._unsent))
        self._unsent.clear()
        while view:
            sent = _sliced(
                functools.partial(self._sock.send, view),
                self._sock,
                self._write_timeout,
                httpcore2.WriteTimeout,
                httpcore2.WriteError,
                events=select.POLLOUT,
            )
            view = view[sent:]
        self._sent = True

    def close(self) -> None:
        self._unsent.clear()
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        inner = self._inner
        return Stream(
            _on_a_call_thread(lambda: inner.start_tls(ssl_context, server_hostname, timeout))
        )

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and _poll is not None:
            return _readable(self._sock)
        return self._inner.get_extra_info(info)


class Backend(httpcore2.NetworkBackend):
    """Wraps httpcore2's own backend; every stream it makes is a `Stream`."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        inner = self._inner
        return Stream(
            _on_a_call_thread(
                lambda: inner.connect_tcp(host, port, timeout, local_address, socket_options)
            )
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        inner = self._inner
        return Stream(
            _on_a_call_thread(lambda: inner.connect_unix_socket(path, timeout, socket_options))
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

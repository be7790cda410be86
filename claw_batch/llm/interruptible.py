"""Socket I/O for model calls that gives up at the job's deadline and on Ctrl-C.

A model call runs on the job's own thread: handing it to another thread and waiting there
costs two more GIL hand-overs per call, ~14 % of claw's CPU at -j 32 (bench/parallel.py,
zero latency). What the other thread bought is kept here, one level down: every blocking
read and write of `transport`'s sockets is cut into waits of at most `cancel.POLL` seconds
that check, between them, the run's cancel flag and the deadline the adapter set for the
calling thread. A hung endpoint, or one that trickles its reply, cannot keep a call past the
deadline, and Ctrl-C ends it within a poll. Connecting (DNS, TCP, TLS: once per connection
with keep-alive) cannot be cut up like that; it runs on a call thread (`callthreads`) that
the job waits for the same way.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from claw_batch import baton, cancel
from claw_batch.errors import LimitExceeded
from claw_batch.llm.callthreads import CallThreads

T = TypeVar("T")
A = TypeVar("A")
TIMEOUT = "timeout: the model call did not finish before the job's deadline"

_local = threading.local()  # .deadline: time.monotonic() by which the thread's call must end
_connects = CallThreads("claw-model-connect")


def deadline(at: float) -> contextlib.AbstractContextManager[None]:
    """Calls made by this thread inside the block end by `at` (time.monotonic())."""
    return _Deadline(at)


class _Deadline:
    """`deadline`, as a class: entered around every model call, where a generator-based
    context manager costs three times as much."""

    __slots__ = ("_at",)

    def __init__(self, at: float) -> None:
        self._at = at

    def __enter__(self) -> None:
        _local.deadline = self._at

    def __exit__(self, *exc: object) -> None:
        _local.deadline = None


def _left() -> float | None:
    """Seconds to the calling thread's deadline; raises on cancel or once it passed."""
    cancel.check()
    at: float | None = getattr(_local, "deadline", None)
    if at is None:
        return None
    left = at - time.monotonic()
    if left <= 0:
        raise LimitExceeded(TIMEOUT)
    return left


def send_all(sock: socket.socket, data: bytes, timeout: float | None) -> None:
    """All of `data` on the non-blocking `sock`; `timeout`: seconds any one wait may last."""
    _left()
    try:  # a request fits the socket's buffer: sent at once, as `_sliced` would, for less
        sent = sock.send(data)
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        sent = 0
    if sent == len(data):
        return
    view = memoryview(data)[sent:]
    while view:
        sent = _sliced(sock.send, view, sock, timeout, select.POLLOUT)
        view = view[sent:]


def recv_into(
    sock: socket.socket, buffer: memoryview, timeout: float | None, *, wait_first: bool = False
) -> int:
    """Bytes read from the non-blocking `sock` into `buffer`, 0 at its end. `wait_first`:
    poll before the first try (the first read after a request: its reply cannot be there
    yet, unless a TLS socket holds decrypted bytes, which poll does not see)."""
    if wait_first and isinstance(sock, ssl.SSLSocket) and sock.pending():
        wait_first = False
    return _sliced(sock.recv_into, buffer, sock, timeout, select.POLLIN, wait_first)


def _sliced(
    op: Callable[[A], T],
    arg: A,
    sock: socket.socket,
    timeout: float | None,
    events: int,
    wait_first: bool = False,
) -> T:
    """`op(arg)` on the non-blocking `sock`, waiting at most `timeout` seconds for it to be ready
    (TimeoutError after that).

    The operation is tried at once: a socket with a timeout would poll before every send and
    recv, a second system call (and GIL hand-over) when the socket is ready anyway, as it is
    to send a request or to read the rest of a reply. When it would block, the thread waits
    without the baton (see `baton`) until the socket is ready.
    """
    give_up = None if timeout is None else time.monotonic() + timeout
    ready = not wait_first
    while True:
        want = events
        _left()  # an endpoint that never stops sending is cut at the deadline, and on Ctrl-C
        if ready:
            try:
                return op(arg)
            except ssl.SSLWantWriteError:  # TLS may need to write to go on reading
                want = select.POLLOUT
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
        with baton.released():
            _await(sock, want, give_up)
        ready = True


def _await(sock: socket.socket, events: int, give_up: float | None) -> None:
    """Until `sock` is ready for `events`, in polls of at most `cancel.POLL` seconds that look
    at the run's cancel flag and the thread's deadline between them; TimeoutError at
    `give_up`."""
    poller = select.poll()
    try:
        poller.register(sock, events)
    except ValueError as exc:  # closed meanwhile: no file descriptor left
        raise ConnectionAbortedError(str(exc)) from exc
    while True:
        wait = cancel.POLL
        left = _left()
        if left is not None:
            wait = min(wait, left)
        if give_up is not None:
            until = give_up - time.monotonic()
            if until <= 0:
                raise TimeoutError("timed out")
            wait = min(wait, until)
        if poller.poll(wait * 1000):
            return


def connect(fn: Callable[[], socket.socket]) -> socket.socket:
    """`fn()` (which connects) on another thread, waited for as `_sliced` waits; a socket
    connected after the wait was given up is closed."""
    lock = threading.Lock()
    given_up = False
    made: list[socket.socket] = []

    def connecting() -> socket.socket:
        sock = fn()
        with lock:
            if given_up:
                sock.close()
            else:
                made.append(sock)
        return sock

    call = _connects.submit(connecting)
    try:
        with baton.released():
            while True:
                left = _left()
                if call.wait(cancel.POLL if left is None else min(left, cancel.POLL)):
                    return call.result()
    except BaseException:
        with lock:
            given_up = True
            for sock in made:  # connected after all, but too late
                sock.close()
        raise

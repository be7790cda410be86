"""A worker process's main loop (`python -m claw_batch.llm.workerproc`, started by `workers`).

It reads pickled messages on stdin and answers on stdout:

    in   ("endpoint", id, EndpointSpec)    build that endpoint's adapter, once
         ("call", call, id, ChatRequest, deadline, Ticket)
         ("ticket", call, Ticket)           the coordinator's breaker let a retry go out
         ("abandon", call)                  the job gave up: its result is not wanted
    out  ("ready",)                         the adapter's imports are done
         ("admit", call, reports, model, deadline)      may the adapter retry?
         ("done", call, reports, ok, Completion | exception)

`reports` are the breaker calls the adapter made since the call's last message (succeeded,
failed, abandoned, broken), made again on the coordinator's breaker, the only one. Calls run on
threads, many at once; each gives up at its deadline, which travels as a number
(`time.monotonic()` is system-wide). End of input (the run ended, or was killed) ends the
process at once, whatever calls are still running.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import sys
import threading
from typing import IO, Any

from claw_batch.errors import LimitExceeded
from claw_batch.llm.base import LLM
from claw_batch.llm.breaker import Breaker, Ticket
from claw_batch.llm.callthreads import CallThreads
from claw_batch.llm.endpoints import EndpointSpec
from claw_batch.llm.messages import ChatRequest
from claw_batch.llm.workers import TIMEOUT


class _Call:
    """One call as its thread and the input loop share it."""

    def __init__(self, call: int, first: Ticket) -> None:
        self.call = call
        self.first: Ticket | None = first  # admitted by the coordinator as it sent the call
        self.reports: list[tuple[Any, ...]] = []
        self.replies: queue.SimpleQueue[Ticket | None] = queue.SimpleQueue()  # None: abandoned
        self.abandoned = False

    def take_reports(self) -> list[tuple[Any, ...]]:
        reports, self.reports = self.reports, []
        return reports


class Output:
    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._stream.write(data)
            self._stream.flush()


class RelayBreaker(Breaker):
    """The adapter's breaker in a worker: admissions are asked of the coordinator's breaker,
    the rest is reported to it with the call's next message."""

    def __init__(self, output: Output) -> None:
        super().__init__()
        self._output = output
        self._local = threading.local()  # .call: the _Call of the calling thread

    def serve(self, call: _Call) -> None:
        self._local.call = call

    def admit(self, model: str, deadline: float) -> Ticket:
        call: _Call = self._local.call
        if call.first is not None:
            first, call.first = call.first, None
            return first
        if not call.abandoned:
            self._output.send(("admit", call.call, call.take_reports(), model, deadline))
            ticket = call.replies.get()
            if ticket is not None:
                return ticket
        raise LimitExceeded(TIMEOUT)  # given up on by the job: nobody reads this

    def succeeded(self, ticket: Ticket) -> None:
        self._local.call.reports.append(("succeeded", ticket))

    def failed(self, ticket: Ticket, reason: str, retry_after: float | None) -> None:
        self._local.call.reports.append(("failed", ticket, reason, retry_after))

    def abandoned(self, ticket: Ticket) -> None:
        self._local.call.reports.append(("abandoned", ticket))

    def broken(self, message: str, model: str | None = None) -> None:
        self._local.call.reports.append(("broken", message, model))


class Worker:
    def __init__(self, output: Output) -> None:
        self.output = output
        self.breaker = RelayBreaker(output)
        self.endpoints: dict[int, Any] = {}
        self.calls: dict[int, _Call] = {}
        self.threads = CallThreads("claw-worker-call")

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "endpoint":
            _, endpoint, spec = message
            self.endpoints[endpoint] = build(spec, self.breaker)
        elif kind == "call":
            _, call, endpoint, request, deadline, ticket = message
            entry = self.calls[call] = _Call(call, ticket)
            llm = self.endpoints[endpoint]
            self.threads.submit(lambda: self.run(llm, entry, request, deadline))
        elif kind == "ticket":
            self.calls[message[1]].replies.put(message[2])
        elif kind == "abandon":
            given_up = self.calls.get(message[1])
            if given_up is not None:
                given_up.abandoned = True
                given_up.replies.put(None)

    def run(self, llm: Any, call: _Call, request: ChatRequest, deadline: float) -> None:
        self.breaker.serve(call)
        try:
            completion = llm.complete(request, deadline=deadline)
        except Exception as exc:  # the coordinator raises it where the job called
            self._done(call, False, portable(exc))
        else:
            self._done(call, True, completion)

    def _done(self, call: _Call, ok: bool, value: object) -> None:
        del self.calls[call.call]
        if not call.abandoned:
            self.output.send(("done", call.call, call.take_reports(), ok, value))


def portable(exc: Exception) -> Exception:
    """`exc`, or its text in an error that survives pickling (a class with odd arguments)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def build(spec: EndpointSpec, breaker: Breaker) -> LLM:
    """The endpoint's adapter, with the key from this process's environment (the run's)."""
    return spec.build(spec.key(os.environ), breaker)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run stops its workers
    output = Output(os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 1)  # whatever prints cannot garble the messages
    import claw_batch.llm.openai_compat  # noqa: F401  # before `ready`: the first call waits not

    worker = Worker(output)
    output.send(("ready",))
    stdin = sys.stdin.buffer
    while True:
        try:
            message = pickle.load(stdin)
        except (EOFError, OSError):
            os._exit(0)  # the run is over: calls still running are not wanted
        worker.handle(message)


if __name__ == "__main__":
    main()

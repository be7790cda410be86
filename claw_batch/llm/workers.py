"""Model calls in worker processes: a run with many jobs in flight uses more than one core.

A run is one process and all its Python runs under one GIL: past ~100 jobs in flight, -j adds
nothing. The part of a turn that is pure CPU and needs nothing of the project is the model call
(encoding the request, HTTP, decoding the reply into a `Completion`). `Pool.proxy` wraps a live
endpoint in a `WorkerLLM` that hands each call to a worker process (`workerproc`) and waits for
its `Completion` or its error. Everything else stays here, in the coordinator: the graph, the
ledger, the lock, every write, the tool loops, cassettes (recording wraps the proxy) and the
limits that span jobs. A provider's `max_concurrency` is `endpoints.Throttled`, around the proxy;
the endpoint's breaker stays here too: a worker's adapter asks it for every retry (`admit`) and
reports what became of each attempt with the call's next message, so a 429 storm is waited out
together and a refused key fails every later call, whichever process makes it.

When: only on a machine with AUTO_CORES cores or more. A run's first calls are made in this
process, so its first request leaves before any worker started; the workers start once
AUTO_FROM calls are in flight at once, AUTO_AFTER seconds or more after the first (which takes
a large -j, that many jobs to run, and a run long enough to repay their start), and take the
calls from when they are ready. $CLAW_WORKERS sets the number (0: never); set, the workers
start with the run's first call, which waits for them all (for tests and benchmarks).

A worker is given the endpoint as an `EndpointSpec` naming the key's environment variable,
never the key: it reads it from its environment, the run's. It exits when its pipe from the
coordinator ends (the run ended, or was killed with SIGKILL), and the terminal's Ctrl-C does
not reach it (a session of its own): the run stops it.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from claw_batch import baton, cancel
from claw_batch.cores import usable_cores
from claw_batch.errors import LimitExceeded, ModelError, UsageError
from claw_batch.llm.failures import shown_url

if TYPE_CHECKING:
    from claw_batch.llm.base import LLM
    from claw_batch.llm.breaker import Breaker, Ticket
    from claw_batch.llm.endpoints import EndpointSpec
    from claw_batch.llm.messages import ChatRequest, Completion

ENV = "CLAW_WORKERS"
AUTO_FROM = 64  # model calls in flight at once before a run starts workers (BENCHMARKS.md)
# Seconds from a run's first call. A worker's start costs ~0.5-1 s of a core (imports), paid
# while the run goes on: a 200-job run at -j 100 (2-3 s) came out slower with workers.
AUTO_AFTER = 5.0
# On 2 cores workers lose once the in-process call is lean (issue 17's transport): 2,000 jobs
# at -j 200 took 12.8-13.4 s with a worker against 10.0-12.1 s without (BENCHMARKS.md). More
# cores than that are not measured yet.
AUTO_CORES = 4
CALLS_PER_WORKER = 100  # what one process drives well: a worker per this many jobs (-j)
STOP_WAIT = 2.0  # seconds a worker is given to exit at the end of a run before SIGKILL
TIMEOUT = "timeout: the model call did not finish before the job's deadline"  # the adapter's
REPORTS = frozenset({"succeeded", "failed", "abandoned", "broken"})  # Breaker's, relayed


def pool_for_run(jobs: int, environ: Mapping[str, str]) -> Pool | None:
    """The run's workers, not started yet; None when it makes every call itself."""
    value = environ.get(ENV, "").strip()
    if value:
        if not value.isdigit():
            raise UsageError(f"{ENV}={value!r} is not a number of worker processes (e.g. 2, or 0)")
        return Pool(int(value), environ, eager=True) if int(value) else None
    cores = usable_cores()
    if jobs < AUTO_FROM or cores < AUTO_CORES:
        return None
    return Pool(max(1, min(cores - 1, -(-jobs // CALLS_PER_WORKER))), environ)  # a core for us


class Pool:
    def __init__(self, size: int, environ: Mapping[str, str], *, eager: bool = False) -> None:
        self.size = size
        self.environ = dict(environ)
        self.eager = eager  # start with the first call and make it wait for a worker
        self.used = 0  # worker processes started by the run, for -v
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._first: float | None = None  # when the run's first call began
        self._turn = 0  # round robin among equally loaded workers
        self._endpoints: list[EndpointSpec] = []

    def proxy(self, spec: EndpointSpec, breaker: Breaker, local: LLM) -> LLM:
        """`local` (the in-process adapter) makes the calls no worker is ready for."""
        with self._lock:
            self._endpoints.append(spec)
            return WorkerLLM(self, len(self._endpoints) - 1, spec, breaker, local)

    def close(self) -> None:
        """Stop the workers: their pipes close, and one that does not exit is killed."""
        with self._lock:
            workers, self._workers = self._workers, []
            self._first = None
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.reap()

    def enter(self, deadline: float) -> _Worker | None:
        """A call begins: the worker to make it, or None to make it in this process."""
        with self._lock:
            self._in_flight += 1
            if self.size and not self._workers and self._due():
                self._start()
            workers = self._workers
        if self.eager:
            self._await_ready(workers, deadline)
        return self._choose(workers)

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def call_id(self) -> int:
        return next(self._ids)

    def endpoint(self, index: int) -> EndpointSpec:
        return self._endpoints[index]

    def _due(self) -> bool:
        """Called under the lock: whether the run has shown that it is long and wide."""
        if self.eager:
            return True
        now = time.monotonic()
        self._first = self._first or now
        return self._in_flight >= AUTO_FROM and now - self._first >= AUTO_AFTER

    def _start(self) -> None:
        """Called under the lock. Workers that cannot be started (no processes or file
        descriptors left) leave the calls to this process, as before they were ready."""
        with contextlib.suppress(OSError):
            while len(self._workers) < self.size:
                self._workers.append(_Worker(self))
                self.used += 1
        self.size = len(self._workers)

    def _choose(self, workers: list[_Worker]) -> _Worker | None:
        ready = [w for w in workers if w.ready.is_set() and w.died is None]
        if not ready:
            return None
        self._turn += 1
        turn = self._turn % len(ready)
        return min(ready[turn:] + ready[:turn], key=lambda w: len(w.pending))

    def _await_ready(self, workers: list[_Worker], deadline: float) -> None:
        """Until every worker is ready (or dead: with none left, calls are made here)."""
        while not all(w.ready.is_set() or w.died is not None for w in workers):
            left = deadline - time.monotonic()
            if left <= 0:
                raise LimitExceeded(TIMEOUT)
            cancel.sleep(min(left, 0.01))


class _Worker:
    """One worker process, its pipes, and the calls it is making."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.ready = threading.Event()
        self.died: str | None = None  # why it is gone, for the calls it was making
        self.pending: dict[int, queue.SimpleQueue[tuple[Any, ...]]] = {}
        self._told: set[int] = set()  # endpoints it knows
        self._write = threading.Lock()
        package = Path(__file__).resolve().parents[2]  # `-m` finds this claw_batch, not another
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "claw_batch.llm.workerproc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=package,
            env=pool.environ,
            start_new_session=True,  # Ctrl-C in the terminal is the run's to handle, not its
        )
        self._in: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        self._out: IO[bytes] = self.proc.stdout  # type: ignore[assignment]
        name = f"claw-worker-{self.proc.pid}"
        threading.Thread(target=self._read, name=name, daemon=True).start()

    def send(self, message: tuple[Any, ...], endpoint: int | None = None) -> None:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        with self._write:
            if endpoint is not None and endpoint not in self._told:
                spec = self.pool.endpoint(endpoint)
                self._in.write(pickle.dumps(("endpoint", endpoint, spec)))
                self._told.add(endpoint)
            self._in.write(data)
            self._in.flush()

    def tell(self, message: tuple[Any, ...]) -> None:
        """`send`, to a worker that may have died meanwhile."""
        with contextlib.suppress(OSError, ValueError):  # a closed pipe
            self.send(message)

    def stop(self) -> None:
        with self._write, contextlib.suppress(OSError):
            self._in.close()  # EOF: the worker exits

    def reap(self) -> None:
        try:
            self.proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _read(self) -> None:
        try:
            while True:
                message = pickle.load(self._out)
                if message[0] == "ready":
                    self.ready.set()
                    continue
                replies = self.pending.get(message[1])
                if replies is not None:  # else a call given up on
                    replies.put(message)
        except (EOFError, OSError, pickle.UnpicklingError):
            pass
        self.died = self._exit_said()
        for replies in list(self.pending.values()):
            replies.put(("died", self.died))

    @property
    def gone(self) -> str:
        return f"the worker process {self.proc.pid} making the call is gone"

    def _exit_said(self) -> str:
        try:
            code = self.proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return f"the worker process {self.proc.pid} stopped answering"
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"the worker process {self.proc.pid} making the call {how}"


class WorkerLLM:
    """An endpoint whose calls a worker process makes, with this process's breaker."""

    def __init__(
        self, pool: Pool, endpoint: int, spec: EndpointSpec, breaker: Breaker, local: LLM
    ) -> None:
        self._pool = pool
        self._endpoint = endpoint
        self._url = shown_url((spec.base_url or "").rstrip("/"))
        self._breaker = breaker
        self._local = local

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        try:
            worker = self._pool.enter(deadline)
            if worker is None:
                return self._local.complete(request, deadline=deadline)
            return self._remote(worker, request, deadline)
        finally:
            self._pool.leave()

    def _remote(self, worker: _Worker, request: ChatRequest, deadline: float) -> Completion:
        call = self._pool.call_id()
        replies: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        worker.pending[call] = replies
        outstanding: Ticket | None = self._breaker.admit(request.model, deadline)
        try:
            self._send(
                worker, request, ("call", call, self._endpoint, request, deadline, outstanding)
            )
            while True:
                message = _next(worker, replies, deadline)
                if message[0] == "died":
                    raise self._died(request, message[1])
                self._report(message[2])  # what became of the attempt `outstanding` allowed
                outstanding = None
                if message[0] == "done":
                    _, _, _, ok, value = message
                    if ok:
                        return value  # type: ignore[no-any-return]
                    raise value
                _, _, _, model, at = message  # "admit": the adapter would retry
                outstanding = self._breaker.admit(model, at)
                self._send(worker, request, ("ticket", call, outstanding))
        except BaseException:
            worker.tell(("abandon", call))
            if outstanding is not None:
                self._breaker.abandoned(outstanding)
            raise
        finally:
            del worker.pending[call]

    def _send(self, worker: _Worker, request: ChatRequest, message: tuple[Any, ...]) -> None:
        try:
            worker.send(message, self._endpoint)
        except (OSError, ValueError):  # its pipe is closed: it died or the run is ending
            raise self._died(request, worker.died or worker.gone) from None

    def _died(self, request: ChatRequest, why: str) -> ModelError:
        return ModelError(
            f"model {request.model!r} at {self._url}: {why}; the call was not retried (the "
            "endpoint may have answered it)"
        )

    def _report(self, reports: list[tuple[Any, ...]]) -> None:
        for name, *args in reports:
            if name in REPORTS:
                getattr(self._breaker, name)(*args)


def _next(
    worker: _Worker, replies: queue.SimpleQueue[tuple[Any, ...]], deadline: float
) -> tuple[Any, ...]:
    """The worker's next message about a call; raises at the deadline and on Ctrl-C. Waited
    for without the baton (see `baton`)."""
    with baton.released():
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LimitExceeded(TIMEOUT)
            try:
                return replies.get(timeout=min(left, cancel.POLL))
            except queue.Empty:
                cancel.check()
                if worker.died is not None and replies.empty():  # died as the call was sent
                    return ("died", worker.died)

"""The connection to a Ray cluster for one run (`connect`), and the coordinator's side of it
(`RayCluster`, the seam's Cluster). Ray is imported here, only when a run asks for it.

Loopback: Ray 2.x rewrites a loopback host (127.0.0.1, localhost) given as the cluster's
address, and as `--node-ip-address`, to this machine's outward address
(`ray._private.services.resolve_ip_for_localhost`) before it connects: a cluster started on
127.0.0.1 (a test cluster, or one machine that must not listen outside) would be looked for
where it does not listen. For a loopback address, `connect` keeps the address as given
while `ray.init` runs (and only then); any other address is Ray's to resolve."""

from __future__ import annotations

import contextlib
import importlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from claw_batch.cluster.calls import RayCall, run_on_worker
from claw_batch.cluster.shared import Shared, Stored
from claw_batch.errors import UsageError
from claw_batch.safety.untrusted import printable

if TYPE_CHECKING:
    from claw_batch.agent.budget import Spend
    from claw_batch.config import Clawfile, Executor

T = TypeVar("T")

NAMESPACE = "claw"
# Ray CPUs a job takes: one, so that a node runs as many jobs at once as the CPUs it offers
# (`ray start --num-cpus N`: jobs mostly wait on the model, so N may well exceed its cores).
# Not a fraction: Ray keeps as many idle worker processes as a node's CPUs and ends the rest
# after a second idle, and a new one pays claw's imports again (~0.7 s; with a quarter CPU a
# job, 200 jobs on two nodes started 24 worker processes and ran at 4.8 jobs/s: bench/ray.py).
# -j bounds the jobs in flight across the cluster.
JOB_CPUS = 1.0
NODES_EVERY = 0.3  # seconds: how stale `nodes_of` may be
CONNECT_TIMEOUT = 10.0  # seconds for the head to answer at all
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def connect(executor: Executor, *, say: Callable[[str], None]) -> RayCluster:
    """Connected to the cluster at `executor.address` ("auto": the one this machine is a
    node of; "HOST:PORT": its head's GCS address)."""
    try:
        ray: Any = importlib.import_module("ray")
    except ImportError as e:
        raise UsageError(
            f"--executor ray needs Ray, which is not installed ({e}): pip install 'claw-batch[ray]'"
        ) from None
    address = executor.address
    # claw's SIGTERM handler (commands.common): Ray's driver installs its own failure-signal
    # handler, which prints a C++ stack and ends the process with 15, not claw's 130.
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        _listening(address)
        with _loopback_kept(address):
            ray.init(
                address=address,
                namespace=NAMESPACE,
                log_to_driver=False,
                include_dashboard=False,
                configure_logging=True,
                logging_level="error",
                ignore_reinit_error=True,
            )
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(
            f"cannot connect to the Ray cluster at {address!r} ({first}): start one "
            "(`ray start --head` on the head node, `ray start --address HEAD:PORT` on the "
            "others), or give its head's address with --address HOST:PORT "
            "(executor.address in the clawfile)"
        ) from None
    if callable(sigterm) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, sigterm)  # a SIGTERM ends the run as Ctrl-C does
    _said_on_stderr(say)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    say(f"claw: on the Ray cluster at {address} ({len(nodes)} nodes)")
    return RayCluster(ray, executor)


def _listening(address: str) -> None:
    """Raises ConnectionError at once when nothing listens at HOST:PORT: Ray itself would
    keep trying for a minute before it says so."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        raise ConnectionError(e.strerror or str(e)) from None


def _said_on_stderr(say: Callable[[str], None]) -> None:
    """What the cluster tells the driver (a node that died, a worker killed for memory) is
    said on stderr, its first line, as claw says everything: Ray prints it on stdout, where
    `claw run --json` writes its one document. Ray has no setting for this; its printer
    (`ray._private.worker.print_to_stdstream`, looked up at each message) is replaced."""
    worker: Any = importlib.import_module("ray._private.worker")

    def said(data: Mapping[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines", ())[:1]:
            first = str(line).strip().splitlines()
            if first:
                say(f"claw: the Ray cluster says: {printable(first[0])}")

    worker.print_to_stdstream = said


@contextlib.contextmanager
def _loopback_kept(address: str) -> Iterator[None]:
    host = address.rsplit(":", 1)[0] if ":" in address else address
    if host not in LOOPBACK:
        yield
        return
    services: Any = importlib.import_module("ray._private.services")
    resolve = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = resolve


class RayCluster:
    def __init__(self, ray: Any, executor: Executor) -> None:
        self._ray = ray
        self.executor = executor
        self.shared: Any = None
        self._cache_dir: str | None = None
        self._day = ""
        self._spend: Any = None  # [ObjectRef of the run's Spend] (nested: not resolved by Ray)
        self._calls: list[RayCall[Any]] = []
        self._lock = threading.Lock()
        self._nodes: tuple[float, Mapping[str, str]] = (0.0, {})
        self._closed = False
        # Made once: Ray exports a remote function to the cluster the first time each such
        # object is called (pickled, hashed, disassembled): once per job, that was half of
        # the coordinator's CPU at 1,000 jobs.
        self._work = ray.remote(run_on_worker)

    def share(
        self,
        config: Clawfile,
        *,
        spend: Spend | None,
        cache_dir: Path | None,
        day: str,
    ) -> None:
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        limits = {n: p.max_concurrency for n, p in config.providers.items() if p.max_concurrency}
        self._cache_dir = None if cache_dir is None else str(cache_dir.resolve())
        actor = ray.remote(Shared).options(
            num_cpus=0,
            max_concurrency=1000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
        )
        self.shared = actor.remote(limits, spend, self._cache_dir)
        self._day = day
        self._spend = None if spend is None else [ray.put(spend)]
        ray.get(self.shared.nodes.remote())  # started: its failures are said here, not later

    def put(self, value: object) -> object:
        # Wrapped: Ray would resolve an ObjectRef given as a task's argument itself.
        return Stored(self._ray.put(value))

    def call(self, work: Callable[..., T], *args: Any, job: str) -> RayCall[T]:
        if self.shared is None:
            raise RuntimeError("Cluster.share comes before the first call")
        ray = self._ray
        task = self._work.options(
            max_retries=self.executor.max_retries,
            retry_exceptions=False,
            num_cpus=JOB_CPUS,
            name=f"claw:{job}",
        )
        ref = task.remote(work, self.shared, self._cache_dir, self._day, self._spend, job, *args)
        call: RayCall[T] = RayCall(
            ray, ref, job, self.executor.max_retries, self.shared, self.nodes_of
        )
        with self._lock:
            self._calls = [c for c in self._calls if not c.done]
            self._calls.append(call)
        return call

    def nodes_of(self) -> Mapping[str, str]:
        at, nodes = self._nodes
        if self.shared is None or time.monotonic() - at < NODES_EVERY:
            return nodes
        found: Mapping[str, str] = self._ray.get(self.shared.nodes.remote())
        self._nodes = (time.monotonic(), found)
        return found

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        with self._lock:
            calls, self._calls = self._calls, []
        for call in calls:
            call.cancel()
        try:
            if self.shared is not None:
                ray.get(self.shared.close.remote(), timeout=60)
                ray.kill(self.shared)
        except Exception:  # the cluster is gone already: nothing left to fold there
            pass
        finally:
            self.shared = None
            ray.shutdown()

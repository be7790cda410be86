"""One job's work on the cluster: the function a Ray task runs (`run_on_worker`), and the
coordinator's handle on it (`RayCall`, the seam's RemoteCall)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from claw_batch import cancel
from claw_batch.errors import ClawError, TaskFailed

T = TypeVar("T")


def run_on_worker(
    work: Callable[..., Any],
    shared: Any,
    cache_dir: str | None,
    day: str,
    spend: Any,
    job: str,
    *args: Any,
) -> Any:
    """What a Ray task runs: `work(worker, *args)`; whatever the job held in the shared actor
    is given back when it ends."""
    import ray

    from claw_batch.cluster.worker import RayWorker

    worker = RayWorker(ray, shared, cache_dir, day, spend[0] if spend else None)
    try:
        return work(worker, *args)
    finally:
        shared.finished.remote(job)


class RayCall(Generic[T]):
    def __init__(
        self,
        ray: Any,
        ref: Any,
        job: str,
        retries: int,
        shared: Any,
        nodes: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self._ray = ray
        self.ref = ref
        self.job = job
        self.retries = retries
        self.shared = shared
        self.nodes = nodes  # the running jobs' nodes, as the cluster last read them
        self.done = False
        self.given_back = False

    def result(self, started: Callable[[str], None] | None = None) -> T:
        """The job's value; when it ends without one (Ray gave up on it, its work raised, it
        was cancelled), what it held in the shared actor is given back here: a worker that
        died never said `finished`, and no later attempt will say `started`."""
        try:
            return self._result(started)
        except BaseException:
            self._give_back()
            raise

    def _result(self, started: Callable[[str], None] | None) -> T:
        ray = self._ray
        while not ray.wait([self.ref], timeout=cancel.POLL)[0]:
            if cancel.cancelled():
                self.cancel()
                raise KeyboardInterrupt
            node = self.nodes().get(self.job) if started is not None else None
            if node is not None and started is not None:
                started(node)
                started = None  # said once (a retry elsewhere is the log's to tell)
        self.done = True
        try:
            value: T = ray.get(self.ref)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause
            if isinstance(cause, ClawError):
                raise cause from None
            raise TaskFailed(f"{type(cause).__name__}: {cause}") from None
        except ray.exceptions.TaskCancelledError:
            raise KeyboardInterrupt from None
        except ray.exceptions.RayError as e:  # a worker process or node lost for good
            raise TaskFailed(
                f"the worker running job {self.job} died (its node was lost, or the process "
                f"was killed) and Ray gave up after {self.retries} retries: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from None
        return value

    def _give_back(self) -> None:
        """Its slots, breaker probe and budget reservation, once."""
        if self.given_back or self.shared is None:
            return
        self.given_back = True
        with contextlib.suppress(Exception):  # the cluster is gone: so is what it held
            self.shared.forget.remote(self.job)

    def cancel(self) -> None:
        if self.done:
            return
        self.done = True
        with contextlib.suppress(Exception):  # finished already, or the cluster is gone
            self._ray.cancel(self.ref, force=True)
        self._give_back()

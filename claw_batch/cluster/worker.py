"""A worker's side of a run on a Ray cluster (`claw_batch.run.executor.Worker`): what a job
sent there calls, each shared across the cluster through the run's `Shared` actor — the
providers' slots and breakers, the call cache, the run's spending. The API keys are read
here, from this machine's environment, by the names the clawfile gives: never sent."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_batch import cancel
from claw_batch.agent.budget import Cap, Spend
from claw_batch.cluster.shared import Refused, Slot, Stored, Wait
from claw_batch.config import Clawfile
from claw_batch.errors import LimitExceeded
from claw_batch.llm.breaker import Breaker, Ticket
from claw_batch.llm.callstore import CallStore
from claw_batch.llm.endpoints import Mode, Models, endpoint_spec

if TYPE_CHECKING:
    from claw_batch.llm.base import LLM
    from claw_batch.llm.messages import ChatRequest, Completion


class RayWorker:
    """Handed to the work `Cluster.call` sends, one per task."""

    def __init__(self, ray: Any, shared: Any, cache_dir: str | None, day: str, spend: Any) -> None:
        self._ray = ray
        self.shared = shared  # the actor's handle
        self.cache_dir = cache_dir
        self.day = day
        self._spend = spend  # an ObjectRef of the run's Spend (its caps), or None
        self.job = ""
        context = ray.get_runtime_context()
        self.node = f"{ray.util.get_node_ip_address()} ({context.get_node_id()[:8]})"

    def ask(self, method: str, *args: Any) -> Any:
        """A call of the shared actor, waited for."""
        return self._ray.get(getattr(self.shared, method).remote(*args))

    def get(self, handle: object) -> Any:
        return self._ray.get(handle.ref if isinstance(handle, Stored) else handle)

    def started(self, job: str) -> None:
        self.job = job
        self.ask("started", job, self.node)

    def models(
        self,
        config: Clawfile,
        mode: Mode,
        *,
        environ: Mapping[str, str],
        redact: Callable[[str], str],
        clawfile: str,
    ) -> Models:
        return ClusterModels(self, config, environ, mode, redact=redact, clawfile=clawfile)

    def spend(self) -> Spend | None:
        if self._spend is None:
            return None
        return SharedSpend(self._ray.get(self._spend), self)


class ClusterModels(Models):
    """Models whose live endpoints pace and throttle through the shared actor, and whose call
    cache is the coordinator's."""

    def __init__(
        self,
        worker: RayWorker,
        config: Clawfile,
        environ: Mapping[str, str],
        mode: Mode,
        *,
        redact: Callable[[str], str],
        clawfile: str,
    ) -> None:
        super().__init__(config, environ, mode, redact=redact, clawfile=clawfile)
        self.worker = worker
        if worker.cache_dir is not None and mode.cache and not mode.replay:
            self.cache_dir, self.day = Path(worker.cache_dir), worker.day
            self.calls = SharedStore(worker)

    def end_cache(self, max_size: int) -> None:
        """The coordinator's to do (Cluster.close)."""
        self.calls = None

    def _endpoint(self, provider_name: str) -> LLM:
        spec = endpoint_spec(self.config, self.environ, provider_name, self.clawfile)
        key = spec.key(self.environ)  # this machine's environment: a missing one fails here
        slot: Slot = ((spec.base_url or "").rstrip("/") or None, spec.key_env)
        return spec.build(key, SharedBreaker(self.worker, slot))

    def _live(self, provider_name: str) -> LLM:
        llm = self._endpoint(provider_name)
        provider = self.config.providers.get(provider_name)
        if provider is not None and provider.max_concurrency:
            llm = SharedSlots(llm, self.worker, provider_name)
        return llm


class SharedBreaker(Breaker):
    """One endpoint's breaker, the actor's: a wait it asks for is waited here (Ctrl-C and
    the job's deadline end it)."""

    def __init__(self, worker: RayWorker, slot: Slot) -> None:
        super().__init__()
        self.worker = worker
        self.slot = slot

    def admit(self, model: str, deadline: float) -> Ticket:
        while True:
            cancel.check()
            answer = self.worker.ask(
                "admit", self.slot, model, deadline - time.monotonic(), self.worker.job
            )
            if isinstance(answer, Refused):
                raise answer.error()
            if isinstance(answer, Wait):
                cancel.sleep(min(answer.seconds, max(deadline - time.monotonic(), 0.0)))
                continue
            assert isinstance(answer, Ticket)
            return answer

    def succeeded(self, ticket: Ticket) -> None:
        self.worker.ask("outcome", self.slot, self.worker.job, ticket, "succeeded")

    def failed(self, ticket: Ticket, reason: str, retry_after: float | None) -> None:
        job = self.worker.job
        self.worker.ask("outcome", self.slot, job, ticket, "failed", reason, retry_after)

    def abandoned(self, ticket: Ticket) -> None:
        self.worker.ask("outcome", self.slot, self.worker.job, ticket, "abandoned")

    def broken(self, message: str, model: str | None = None) -> None:
        self.worker.ask("broken", self.slot, message, model)


class SharedSlots:
    """At most the provider's `max_concurrency` calls at a time across the cluster."""

    def __init__(self, inner: LLM, worker: RayWorker, provider: str) -> None:
        self.inner = inner
        self.worker = worker
        self.provider = provider

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        job = self.worker.job
        while not self.worker.ask("acquire", self.provider, job):
            cancel.check()
            if time.monotonic() >= deadline:
                raise LimitExceeded(
                    "timeout: the job's deadline passed while it waited for the provider"
                )
            cancel.sleep(min(cancel.POLL, max(deadline - time.monotonic(), 0.0)))
        try:
            return self.inner.complete(request, deadline=deadline)
        finally:
            self.worker.ask("release", self.provider, job)


class SharedStore(CallStore):
    """The call cache of the coordinator's machine: a reply is in its journal there before
    the job goes on with it."""

    def __init__(self, worker: RayWorker) -> None:
        super().__init__(Path(worker.cache_dir or "."))
        self.worker = worker

    def get(self, key: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.worker.ask("cache_get", key)
        return found

    def put(self, key: str, reply: dict[str, Any], tokens: int) -> None:
        self.worker.ask("cache_put", key, reply, tokens)

    def close(self) -> None:
        """The coordinator's to do (Cluster.close)."""


class SharedSpend(Spend):
    """The run's Spend as the actor holds it: its caps read here, reserve and settle there."""

    def __init__(self, base: Spend, worker: RayWorker) -> None:
        self.__setstate__(base.__getstate__())
        self.worker = worker

    def reserve(
        self, task: str, caps: list[Cap], estimate: float, via: tuple[str, ...] = ()
    ) -> None:
        """`via` is always empty: a task that may delegate does not run on a cluster."""
        refused = self.worker.ask("reserve", self.worker.job, task, caps, estimate)
        if isinstance(refused, Refused):
            raise refused.error()

    def settle(self, task: str, held: float, cost: float | None, via: tuple[str, ...] = ()) -> None:
        self.worker.ask("settle", self.worker.job, task, held, cost)

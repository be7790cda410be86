"""Where a job's tool loop runs. Locally (the default) a job runs on a thread of `claw run`
(claw_batch.run.job). With a cluster (`--executor ray`), a job's tool loop runs elsewhere, in
a scratch copy of the project as the job may see it, and comes back as what it wrote: the
machine that ran `claw run` keeps the graph, the fingerprints, the ledger, the lock, the
call cache and every write to the project (claw_batch.run.shipped applies a job's writes,
with the checks a local job's tools make, only when it succeeded).

The two sides of a cluster, as run/ sees them; claw_batch.cluster implements them on Ray.
Nothing here imports Ray."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from claw_batch.agent.budget import Spend
    from claw_batch.config import Clawfile, Task
    from claw_batch.llm.endpoints import Mode, Models

# Why a task with MCP tools does not run on a cluster (its servers would run where?): yet.
MCP_REFUSED = (
    "MCP servers are not supported with --executor ray yet: run this task with --executor local"
)
# Nor one that may remember: MEMORY.md and the daily notes are claw's to write, and the
# facts would come back as a file no job may write.
REMEMBER_REFUSED = (
    "the remember tool is not supported with --executor ray yet: run this task with "
    "--executor local"
)
DELEGATE_REFUSED = (
    "the delegate tool is not supported with --executor ray yet: run this task with "
    "--executor local"
)


# Nor one whose commands reach the network: they would share the node's, where Ray's own
# services (GCS, the dashboard's job API, the client server, the raylet) listen without
# authentication and run whatever code is sent to them, outside any sandbox, as the user
# that started Ray, on any node: the coordinator's too, where the project is.
NETWORK_REFUSED = (
    "permissions.network: true is not supported with --executor ray: a command with the "
    "network reaches Ray's services on its node, which run any code sent to them without "
    "authentication; run this task with --executor local"
)
# Nor bash without a sandbox: its commands would run as the user that started Ray, on a
# worker shared with other jobs (their scratch copies, the node's snapshot cache that every
# later job there reads, the worker's keys in its environment).
UNSANDBOXED_REFUSED = (
    "bash with sandbox: none is not supported with --executor ray: its commands would run "
    "unconfined as the cluster's user, beside other jobs' copies and the node's snapshot "
    "cache; run this task with --executor local"
)


def refused_on_cluster(task: Task) -> str | None:
    """Why the task's jobs cannot run on a cluster (None: they can)."""
    if any(name.startswith("mcp.") for name in task.tool_names):
        return MCP_REFUSED
    if "remember" in task.offered_tools:
        return REMEMBER_REFUSED
    if "delegate" in task.offered_tools:
        return DELEGATE_REFUSED
    if task.permissions.network:
        return NETWORK_REFUSED
    if task.sandbox == "none" and "bash" in task.offered_tools:
        return UNSANDBOXED_REFUSED
    return None


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class RemoteCall(Protocol[T_co]):
    """One job's work submitted to the cluster."""

    def result(self, started: Callable[[str], None] | None = None) -> T_co:
        """Its value, once it has one; `started` is told the node once its worker says it
        began there (`Worker.started`). Waits in steps of `cancel.POLL`: a Ctrl-C or SIGTERM
        of `claw run` (claw_batch.cancel) cancels the task and raises KeyboardInterrupt. A
        worker or node that dies is Ray's to retry (Executor.max_retries); once it gives
        up, TaskFailed says so. An exception the work raised is raised here."""
        ...


class Cluster(Protocol):
    """The coordinator's side: connected for one run (claw_batch.cluster.ray.connect)."""

    def share(
        self,
        config: Clawfile,
        *,
        spend: Spend | None,
        cache_dir: Path | None,
        day: str,
    ) -> None:
        """Before the first job: what every worker's jobs share across the cluster — the
        providers' `max_concurrency` slots and breakers, the run's `Spend` (budgets per day
        and week), and the call cache in `cache_dir` (None: none) keyed with `day`. They
        live in one place for the whole cluster (a Ray actor on this machine), never one
        per worker."""
        ...

    def put(self, value: object) -> object:
        """`value` stored once in the cluster (Ray's object store), for many calls' `args`:
        a handle the work reads with `Worker.get`. Each node fetches it once."""
        ...

    def call(self, work: Callable[..., T], *args: Any, job: str) -> RemoteCall[T]:
        """Run `work(worker, *args)` on a worker, where `worker` is that worker's `Worker`.
        `work` is a module-level function (sent by name), `args` plain picklable values
        that hold no secret; `job`: the job's name, for the progress display."""
        ...

    def nodes_of(self) -> Mapping[str, str]:
        """The jobs running now -> the node each runs on, as `Worker.node` says it."""
        ...

    def close(self) -> None:
        """The run is over: every task of it cancelled, the shared state closed (the call
        cache's replies folded into its store), the connection let go. Idempotent."""
        ...


class Worker(Protocol):
    """A worker's side, handed to the work `Cluster.call` sends."""

    node: str  # how `claw log`/`show`/the progress name the node: "127.0.0.1 (a3f09c1e)"

    def get(self, handle: object) -> Any:
        """The value `Cluster.put` stored."""
        ...

    def started(self, job: str) -> None:
        """The job started on this node: the coordinator's progress display says where."""
        ...

    def models(
        self,
        config: Clawfile,
        mode: Mode,
        *,
        environ: Mapping[str, str],
        redact: Callable[[str], str],
        clawfile: str,
    ) -> Models:
        """The models a job calls from this worker: keys from `environ` (the worker's own
        environment, by the names the clawfile gives), the call cache, concurrency slots and
        breakers shared across the cluster (`Cluster.share`)."""
        ...

    def spend(self) -> Spend | None:
        """The run's spending, shared across the cluster (None: the run has no ledger)."""
        ...

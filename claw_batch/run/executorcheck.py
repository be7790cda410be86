"""Where a run's jobs go: the command line's `--executor`/`--address` over the clawfile's
`executor:`, else here (config.Executor) — and what a cluster run refuses to do, said before
the run writes anything (exit 2).

A cluster run (claw_batch.run.executor) ships a job's tool loop to a Ray worker and brings
back what it wrote. What cannot travel that way is refused, with the way to run it here:
- `--batch` and `batch: true` tasks: a Batch API round is one file of many jobs' calls,
  sent and collected from this machine;
- `--record`: the cassettes are written from the calls this machine makes (`--replay` is
  fine: cassettes/ ships with the project);
- tasks that use MCP servers: the run's hub holds their connections in this process;
- tasks with `permissions.network: true`: a command with the node's network reaches Ray's
  own services there, which take code from anyone who can connect (no authentication);
- tasks that run bash with `sandbox: none`: their commands would run as the cluster's user
  on a worker shared with other jobs and the node's snapshot cache.
A git hook's run (`claw hook`) always runs here: a commit does not wait on a cluster, and
the clawfile's `executor: {kind: ray}` is for `claw run` (the hook says so once).
A dry run (`-n`, `claw plan`) never connects: it says where the jobs would run, and warns of
what the run would refuse.

Nothing here imports Ray: `importlib.util.find_spec` says whether it is installed."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING

from claw_batch.config import Clawfile, Executor, address_problem
from claw_batch.errors import UsageError

if TYPE_CHECKING:
    from claw_batch.llm.endpoints import Mode

INSTALL = "pip install 'claw-batch[ray]'"
LOCALLY = "run it with --executor local"


def from_command_line(config: Clawfile, kind: str | None, address: str | None) -> Executor | None:
    """`--executor KIND` and `--address ADDR` over the clawfile's `executor:` (what they do
    not say is the clawfile's); None: the command line said neither."""
    if kind is None and address is None:
        return None
    base = config.executor
    kind = kind or base.kind
    if address is not None:
        if kind != "ray":
            raise UsageError(
                f"--address {address}: the address of a Ray cluster, for --executor ray "
                "(or executor: {kind: ray} in the clawfile)"
            )
        problem = address_problem(address)
        if problem is not None:
            raise UsageError(f"--address {problem}")
    return Executor(kind, address or base.address, base.max_retries)


def effective(config: Clawfile, chosen: Executor | None, *, hook: str | None = None) -> Executor:
    """Where the run's jobs go: the command line's choice, else the clawfile's; a git hook's
    run always here."""
    if hook is not None:
        return Executor()
    return chosen if chosen is not None else config.executor


def origin(chosen: Executor | None, clawfile: str) -> str:
    """How the run was told to use the cluster, for its messages."""
    if chosen is not None:
        return "--executor ray"
    return f"executor: {{kind: ray}} ({clawfile})"


def where(executor: Executor) -> str:
    """The cluster, as a dry run names it."""
    if executor.address == "auto":
        return "Ray (address auto: the cluster this machine is a node of)"
    return f"Ray at {executor.address}"


def refusals(
    config: Clawfile, names: Sequence[str], mode: Mode, *, told: str, ray_installed: bool
) -> list[str]:
    """What a cluster run of the tasks `names` cannot do, one line each (none: it can).
    `told`: how the run was told to use the cluster (`origin`)."""
    from claw_batch.mcp.names import is_mcp

    found = []
    if not ray_installed:
        found.append(f"{told} needs Ray, which is not installed here: {INSTALL}")
    if mode.record:
        found.append(
            f"--record writes cassettes from the calls this machine makes; {told} runs the "
            "jobs elsewhere: record with --executor local"
        )
    if mode.batch:
        found.append(
            f"--batch sends the calls through a Batch API from this machine; {told} runs the "
            "jobs elsewhere: use one or the other"
        )
    for name in names:
        task = config.tasks[name]
        if task.batch and not mode.batch and not mode.replay:
            found.append(
                f"task '{name}' has batch: true (its calls go through a Batch API from this "
                f"machine), which {told} does not do: {LOCALLY}"
            )
        mcp = [tool for tool in task.tool_names if is_mcp(tool)]
        if mcp and config.mcp_servers:
            found.append(
                f"task '{name}' uses MCP servers ({', '.join(mcp)}), whose connections live "
                f"in this process, which {told} does not do: {LOCALLY}"
            )
        if "remember" in task.offered_tools:
            found.append(
                f"task '{name}' may remember (MEMORY.md and the daily notes are written here, "
                f"by claw), which {told} does not do yet: {LOCALLY}"
            )
        if "delegate" in task.offered_tools:
            found.append(
                f"task '{name}' may delegate (its sub-jobs are run, recorded and budgeted "
                f"by this process), which {told} does not do yet: {LOCALLY}"
            )
        if task.permissions.network:
            found.append(
                f"task '{name}' has permissions.network: true (its commands would reach Ray's "
                "services on their node, which run any code sent to them without "
                f"authentication), which {told} does not do: {LOCALLY}"
            )
        if task.sandbox == "none" and "bash" in task.offered_tools:
            found.append(
                f"task '{name}' runs bash with sandbox: none (its commands would run unconfined "
                "as the cluster's user, beside other jobs' copies and the node's snapshot "
                f"cache), which {told} does not do: {LOCALLY}"
            )
    return found


def ray_installed() -> bool:
    """Whether `import ray` would find it, without importing it."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False

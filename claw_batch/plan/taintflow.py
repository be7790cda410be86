"""Which tasks outside content can reach, and from where, read from the clawfile alone: what
`claw validate` and `claw graph` show (a run decides for each job, claw_batch.taint.jobtaint).

A task can be tainted by what it declares it reads: the files it watches; inputs or a
`foreach:` glob that can match watched files (or what is around them, `Clawfile.untrusted`);
`git` in its templates (the staged diff); and, through the graph, an upstream task that can
be tainted — by `needs:` (its result) or by an input glob that matches its output — or a
task that can be tainted and delegates to it (`delegate.tasks`). Any task
can still be tainted at run time by what its tools read; that is not shown here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from claw_batch.mcp import names
from claw_batch.plan import overlap
from claw_batch.toolnames import READ_ONLY_TOOLS

if TYPE_CHECKING:
    from claw_batch.config import Clawfile, Task
    from claw_batch.plan.graph import Graph


@dataclass(frozen=True)
class Source:
    """One way outside content can reach a task."""

    short: str  # on a graph: "watch", "outside files", "staged diff" or the upstream's name
    said: str  # in validate: "watch 'inbox/*.txt'", "triage via inputs 'out/*.md'"...


def reach(config: Clawfile, graph: Graph) -> dict[str, tuple[Source, ...]]:
    """Per task that can be tainted, how: its own sources, then its upstream's (file order)."""
    found: dict[str, tuple[Source, ...]] = {}
    for name in graph.order(config.tasks):  # an upstream before the tasks after it
        sources = _own(config, config.tasks[name])
        for upstream in dict.fromkeys(graph.upstream(name)):
            if upstream in found:
                via = graph.via(name, upstream)
                how = f"{via.key[0]} {via.glob!r}" if via else "needs"
                sources.append(Source(upstream, f"{upstream} via {how}"))
        if sources:
            found[name] = tuple(sources)
    _delegated(config, found)
    return {name: found[name] for name in config.tasks if name in found}


def _delegated(config: Clawfile, found: dict[str, tuple[Source, ...]]) -> None:
    """A sub-job of a tainted job is tainted from its start: the tasks that a task which
    can be tainted delegates to (and theirs) — when it keeps `delegate` once tainted, which
    only its `untrusted.allow` grants."""
    grown = True
    while grown:
        grown = False
        for name in list(found):
            task = config.tasks[name]
            if "delegate" not in task.offered_tools or "delegate" not in task.untrusted_allow:
                continue
            for target in task.delegate.tasks:
                had = found.get(target, ())
                if target in config.tasks and all(s.short != name for s in had):
                    found[target] = (*had, Source(name, f"{name} via delegate"))
                    grown = True


def _own(config: Clawfile, task: Task) -> list[Source]:
    sources = []
    if task.watch:
        sources.append(Source("watch", "watch " + ", ".join(repr(g) for g in task.watch)))
    untrusted = [overlap.reads(g) for g in config.untrusted]
    globs = [(f"inputs {g!r}", g) for g in task.inputs]
    if task.foreach is not None and not task.watch:  # a watch task's items are said above
        globs.append((f"foreach {task.foreach!r}", task.foreach))
    for where, glob in globs:
        if any(overlap.intersect(overlap.reads(glob), nfa) for nfa in untrusted):
            sources.append(Source("outside files", f"outside files via {where}"))
    if task.variables is not None and "git" in task.variables:
        sources.append(Source("staged diff", "the staged diff via git"))
    servers = names.servers(task.tool_names)  # what an MCP tool returns is outside content
    if servers:
        said = ", ".join(f"mcp.{s}" for s in servers)
        sources.append(Source("MCP servers", f"the results of its MCP tools ({said})"))
    return sources


def tools_line(task: Task, read_only: Mapping[str, bool] | None = None) -> str:
    """What a tainted job of the task keeps beyond the read-only tools, and what it loses:
    "" when it loses nothing. `read_only`: per MCP server, whether its entry says so (its
    tools stay with a tainted job)."""
    read_only = read_only or {}

    def stays(tool: str) -> bool:
        if not names.is_mcp(tool):
            return tool in READ_ONLY_TOOLS
        return read_only.get(names.split(tool)[0], False)

    def grants(tool: str) -> bool:
        if not names.is_mcp(tool):
            return tool in task.untrusted_allow
        server, glob = names.split(tool)
        return tool in task.untrusted_allow or names.matches(task.untrusted_allow, server, glob)

    kept = [t for t in task.offered_tools if not stays(t)]
    granted = [t for t in kept if grants(t)]
    withheld = [t for t in kept if not grants(t)]
    parts = [f"granted: {', '.join(granted)}"] if granted else []
    parts += [f"withheld: {', '.join(withheld)}"] if withheld else []
    return f" ({'; '.join(parts)})" if parts else ""


def report(config: Clawfile, graph: Graph) -> list[str]:
    """What `claw validate` says of taint: nothing when no task can be tainted."""
    found = reach(config, graph)
    if not found:
        return []
    n = len(found)
    lines = [
        f"outside content can reach {n} task{'s' if n != 1 else ''}; each keeps only "
        "read-only tools unless its untrusted: {allow: [...]} grants more:"
    ]
    for name, sources in found.items():
        said = "; ".join(s.said for s in sources)
        read_only = {s: e.read_only for s, e in config.mcp_servers.items()}
        lines.append(f"  {name}: {said}{tools_line(config.tasks[name], read_only)}")
    return lines

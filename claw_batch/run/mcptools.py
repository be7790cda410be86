"""A task's MCP tools, once per run: its `tools:` patterns matched against each server's
list (claw_batch.mcp.offer, from the catalog), made tools the loop calls like the built-ins
(claw_batch.tools.mcptool), and what they add to the jobs' fingerprint: the server's entry
and its code in the project, and the names and schemas of the tools offered — nothing of a
server the task does not use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from claw_batch.config import Task
from claw_batch.errors import ClawfileError
from claw_batch.mcp import names
from claw_batch.mcp.offer import kept_when_tainted, offered
from claw_batch.plan.fingerprint import digest
from claw_batch.run.context import RunContext
from claw_batch.tools.mcptool import McpTool
from claw_batch.tools.registry import Tool


@dataclass(frozen=True)
class McpOffer:
    tools: dict[str, Tool]  # by the name the model calls
    kept: dict[str, Tool]  # what a job that read outside content keeps of them
    qualified: dict[str, str]  # SERVER__TOOL -> mcp.SERVER.TOOL
    entries: Mapping[str, str]  # per server used, its entry's digest

    def digest(self, built_in: str, tools: Mapping[str, Tool]) -> str:
        """The fingerprint's `tools` part: the built-ins' as before, and these."""
        mcp = [
            {"name": t.name, "schema": t.parameters, "entry": self.entries[t.server]}
            for t in tools.values()
            if isinstance(t, McpTool)
        ]
        return digest({"built_in": built_in, "mcp": mcp})


def offer(run: RunContext, name: str, task: Task) -> McpOffer:
    servers = run.servers
    config = run.project.config
    patterns = [p for p in task.tool_names if names.is_mcp(p)]
    for pattern in patterns:
        server, _ = names.split(pattern)
        if servers is None or server not in config.mcp_servers:
            raise ClawfileError(
                f"clawfile.yaml:tasks.{name}.tools: {pattern}: no MCP server {server!r} in "
                "mcp_servers:"
            )
    assert servers is not None
    found = offered(name, patterns, servers.tools, run.warn)
    read_only = {s: e.read_only for s, e in config.mcp_servers.items()}
    kept = {o.wire for o in kept_when_tainted(found, task.untrusted_allow, read_only)}
    tools: dict[str, Tool] = {}
    for o in found:
        entry = config.mcp_servers[o.server]
        tools[o.wire] = McpTool.of(
            o.server,
            o.tool.name,
            o.wire,
            o.tool.description,
            o.tool.schema,
            timeout=entry.timeout,
            caller=servers,
            dirs=servers.dirs(o.server),
        )
    entries = {s: servers.digest(s) for s in {o.server for o in found}}
    return McpOffer(
        tools=tools,
        kept={w: t for w, t in tools.items() if w in kept},
        qualified={o.wire: o.qualified for o in found},
        entries=entries,
    )

"""What `claw mcp list` and `claw validate --mcp` find: each declared server started and
asked for its tools (or why it could not be), and the tasks' `mcp.SERVER.TOOL` names that
name no tool of their server."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from claw_batch.config import Clawfile, provider_keys
from claw_batch.mcp import names
from claw_batch.mcp.hub import Hub, RemoteTool, ServerFailure

SHOWN_TOOLS = 12  # "it has: ..." names at most this many


@dataclass(frozen=True)
class Found:
    """One server: its tools, or why it has none."""

    server: str
    kind: str  # stdio | http
    sandboxed: bool
    tools: tuple[RemoteTool, ...] = ()
    failure: str | None = None


@dataclass(frozen=True)
class Survey:
    servers: tuple[Found, ...]
    missing: tuple[str, ...]  # `tasks.x.tools[2]: mcp.git.git_lgo: no such tool on git ...`
    notes: tuple[str, ...]  # what the user should know (a key a server does not get)

    @property
    def failed(self) -> tuple[Found, ...]:
        return tuple(f for f in self.servers if f.failure is not None)


def survey(root: Path, config: Clawfile, env: Mapping[str, str], only: str | None = None) -> Survey:
    """Start each declared server (or `only`), list its tools, stop it."""
    chosen = {n: e for n, e in config.mcp_servers.items() if only is None or n == only}
    hub = Hub(root, chosen, env, secrets=provider_keys(config))
    found = []
    try:
        for name, entry in chosen.items():
            sandboxed = entry.kind == "stdio" and entry.sandbox != "none"
            try:
                tools = hub.tools(name)
            except ServerFailure as e:
                found.append(Found(name, entry.kind, sandboxed, failure=str(e)))
                continue
            found.append(Found(name, entry.kind, sandboxed, tools))
    finally:
        hub.close()
    return Survey(tuple(found), _missing(config, found), tuple(hub.notes))


def _missing(config: Clawfile, found: list[Found]) -> tuple[str, ...]:
    listed = {f.server: f.tools for f in found if f.failure is None}
    said = []
    for task_name, task in config.tasks.items():
        named = (("tools", task.tools or ()), ("untrusted.allow", task.untrusted_allow))
        for where, patterns in named:
            for i, pattern in enumerate(patterns):
                if not names.is_mcp(pattern):
                    continue
                server, _ = names.split(pattern)
                if server not in config.mcp_servers:
                    declared = ", ".join(config.mcp_servers) or "none"
                    said.append(
                        f"tasks.{task_name}.{where}[{i}]: {pattern}: no MCP server {server!r} "
                        f"in mcp_servers: (declared: {declared})"
                    )
                    continue
                if server not in listed:  # not surveyed, or failed: said elsewhere
                    continue
                tools = [t.name for t in listed[server]]
                if not any(names.matches([pattern], server, t) for t in tools):
                    more = ", ..." if len(tools) > SHOWN_TOOLS else ""
                    has = ", ".join(tools[:SHOWN_TOOLS]) + more if tools else "no tools"
                    said.append(
                        f"tasks.{task_name}.{where}[{i}]: {pattern}: no such tool on {server} "
                        f"(it has: {has})"
                    )
    return tuple(said)

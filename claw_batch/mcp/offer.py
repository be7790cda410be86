"""Which of a server's tools a task is offered, and under which names: its `tools:` patterns
(`mcp.SERVER.TOOL`, `mcp.SERVER.*`) matched against the server's list (mcp.catalog).

The model calls a tool `SERVER__TOOL`, a valid OpenAI function name (`^[a-zA-Z0-9_-]{1,64}$`).
A tool whose name cannot be one is skipped with a warning, never renamed: a renamed tool
could take another's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from claw_batch.errors import ClawfileError
from claw_batch.mcp import names
from claw_batch.mcp.remote import RemoteTool

FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")


@dataclass(frozen=True)
class Offered:
    """One MCP tool a task's jobs are offered."""

    server: str
    tool: RemoteTool
    wire: str  # SERVER__TOOL: what the model calls

    @property
    def qualified(self) -> str:
        return names.qualified(self.server, self.tool.name)


def offered(
    task: str,
    patterns: Iterable[str],
    catalog: Callable[[str], tuple[RemoteTool, ...]],
    warn: Callable[[str], None],
) -> tuple[Offered, ...]:
    """The task's MCP tools, in the order its patterns and the servers list them. A pattern
    that matches no tool of its server is a ClawfileError that names the tools there are."""
    patterns = [p for p in patterns if names.is_mcp(p)]
    found: dict[str, Offered] = {}
    for pattern in patterns:
        server, _ = names.split(pattern)
        tools = catalog(server)
        matched = [t for t in tools if names.matches([pattern], server, t.name)]
        if not matched:
            there = ", ".join(t.name for t in tools) or "none"
            raise ClawfileError(
                f"clawfile.yaml:tasks.{task}.tools: {pattern} matches no tool of MCP server "
                f"{server!r} (its tools: {there})"
            )
        for tool in matched:
            wire = names.wire_name(server, tool.name)
            if not FUNCTION_NAME.match(wire):
                warn(
                    f"claw: warning: {task}: MCP server {server!r}'s tool {tool.name!r} is not "
                    f"offered: {wire!r} is no valid function name for the model"
                )
                continue
            other = found.get(wire)
            if other is not None and other.qualified != names.qualified(server, tool.name):
                warn(
                    f"claw: warning: {task}: {names.qualified(server, tool.name)} is not "
                    f"offered: its name {wire!r} is {other.qualified}'s"
                )
                continue
            found.setdefault(wire, Offered(server, tool, wire))
    return tuple(found.values())


def kept_when_tainted(
    tools: Iterable[Offered], allow: Iterable[str], read_only: Mapping[str, bool]
) -> tuple[Offered, ...]:
    """What a job that read outside content keeps of them: a `read_only: true` server's
    tools, and those the task grants in `untrusted.allow` (mcp.SERVER.TOOL patterns)."""
    allow = tuple(allow)
    return tuple(
        t
        for t in tools
        if read_only.get(t.server, False) or names.matches(allow, t.server, t.tool.name)
    )

"""How a task names an MCP server's tools, and the names the model is offered them under.

In `tools:` (and `untrusted.allow`, `always:`), `mcp.SERVER.TOOL` names one tool and
`mcp.SERVER.*` all of a server's tools. The model sees `SERVER__TOOL`: claw's own tools have
no `__` in their names, so the two can never collide. A leaf: validating a clawfile imports
nothing of the MCP SDK.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

PREFIX = "mcp."
SEPARATOR = "__"


def is_mcp(name: str) -> bool:
    return name.startswith(PREFIX)


def split(pattern: str) -> tuple[str, str]:
    """`mcp.git.git_log` -> ("git", "git_log"); `mcp.git.*` -> ("git", "*"). The caller has
    checked `is_mcp`; a pattern without a tool part is ValueError."""
    server, dot, tool = pattern[len(PREFIX) :].partition(".")
    if not server or not dot or not tool:
        raise ValueError(f"{pattern!r}: expected mcp.SERVER.TOOL or mcp.SERVER.*")
    return server, tool


def servers(patterns: Iterable[str]) -> tuple[str, ...]:
    """The servers the patterns name, in order, once each."""
    return tuple(dict.fromkeys(split(p)[0] for p in patterns if is_mcp(p)))


def matches(patterns: Iterable[str], server: str, tool: str) -> bool:
    """Whether one of the patterns names SERVER's TOOL."""
    for pattern in patterns:
        if is_mcp(pattern):
            name, glob = split(pattern)
            if name == server and fnmatch.fnmatchcase(tool, glob):
                return True
    return False


def wire_name(server: str, tool: str) -> str:
    """The name the model calls it by."""
    return f"{server}{SEPARATOR}{tool}"


def qualified(server: str, tool: str) -> str:
    """The name the clawfile knows it by: `mcp.SERVER.TOOL`."""
    return f"{PREFIX}{server}.{tool}"

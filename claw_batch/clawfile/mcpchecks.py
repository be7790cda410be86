"""The checks of `mcp_servers:` that pydantic cannot make key by key: which keys go with a
stdio server and which with an HTTP one, secrets that would travel in clear or reach a
server they are not for, and the servers that `tools:` and `untrusted.allow` name."""

from __future__ import annotations

import difflib
import fnmatch
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_batch.clawfile.yamlsource import Problem, YamlSource
from claw_batch.config import KeyPath, provider_keys
from claw_batch.mcp import names
from claw_batch.safety import control

if TYPE_CHECKING:
    from claw_batch.config import Clawfile, McpServer
    from claw_batch.plan.overlap import Nfa

_STDIO_ONLY = ("env", "network", "sandbox")
_LOOPBACK_NAMES = ("localhost",)
_EXAMPLE = "command: [python, -m, mcp_server_time]"


def check(config: Clawfile, source: YamlSource) -> list[Problem]:
    """Problems of the entries that passed validation, and of the names that refer to one."""
    problems: list[Problem] = []
    keys = provider_keys(config)
    for name, server in config.mcp_servers.items():
        problems += _entry(name, server, source.data["mcp_servers"][name], source, keys)
    return problems + _references(config, source)


def warnings(config: Clawfile, source: YamlSource) -> list[Problem]:
    """Allowed but worth a look: a server no task uses, a grant of a read-only server."""
    used = {server for task in config.tasks.values() for server in names.servers(task.tool_names)}
    found = [
        source.problem(
            ("mcp_servers", name),
            f"warning: no task uses MCP server {name!r}: name its tools in a task's tools:, "
            f"e.g. mcp.{name}.*",
        )
        for name in config.mcp_servers
        if name not in used
    ]
    for task_name, task in config.tasks.items():
        for index, tool in enumerate(task.untrusted_allow):
            server = config.mcp_servers.get(_server(tool) or "")
            if server is not None and server.read_only:
                found.append(
                    source.problem(
                        ("tasks", task_name, "untrusted", "allow", index),
                        f"warning: MCP server {_server(tool)!r} is read_only: true: a job that "
                        "read outside content keeps its tools anyway, so this grants nothing",
                    )
                )
    return found


def code_warning(
    path: str,
    nfa: Nfa,
    code: tuple[tuple[str, str], ...],
    root: Path,
    kind: str = "MCP server",
) -> str | None:
    """The warning for a write glob or an output (`path`, read as `nfa`) that names or reaches
    the code of an MCP server (control.server_code; or of what `kind` says, as a task's
    notify command, control.notify_code): no job may write it, so naming it grants nothing,
    and a glob that reaches it grants only the rest."""
    from claw_batch.plan import overlap

    rel = control.clean(path)
    for code_path, server in code:
        if not control.has_magic(path) and control.is_under(rel, code_path):
            what = "is" if rel == code_path else f"is under {code_path},"
            return (
                f"warning: {path!r} {what} the code of {kind} {server!r}, which no job "
                "may write: naming it grants nothing"
            )
    reached: dict[str, list[str]] = {}
    tops = [c for c, _ in code]
    for code_path, server in code:
        if any(top != code_path and control.is_under(code_path, top) for top in tops):
            continue  # said with the folder it is in
        below = [code_path, f"{code_path}/**"] if (root / code_path).is_dir() else [code_path]
        if any(overlap.intersect(nfa, overlap.reads(glob)) for glob in below):
            reached.setdefault(server, []).append(code_path)
    if not reached:
        return None
    servers = ", ".join(f"{s!r} ({', '.join(paths)})" for s, paths in reached.items())
    return (
        f"warning: {path!r} reaches the code of {kind}{'s' * (len(reached) > 1)} "
        f"{servers}, which no job may write: it grants the rest"
    )


def _entry(
    name: str, server: McpServer, written: dict[str, Any], source: YamlSource, keys: dict[str, str]
) -> list[Problem]:
    at: KeyPath = ("mcp_servers", name)
    if server.command and server.url is not None:
        return [
            source.problem(
                at,
                "command: and url: both given: a server is started by claw (command:) or "
                "reached at its URL (url:), not both",
            )
        ]
    if not server.command and server.url is None:
        if "command" in written or "url" in written:
            return []  # refused by validation already
        return [
            source.problem(
                at,
                f"missing command: or url: — {_EXAMPLE} starts a server in the sandbox, "
                "url: https://host/mcp reaches one over streamable HTTP",
            )
        ]
    if server.url is not None:
        return _http(at, server, written, source)
    problems = []
    if "headers_env" in written:
        variables = ", ".join(server.headers_env.values()) or "TOKEN"
        problems.append(
            source.problem(
                (*at, "headers_env"),
                "headers_env is for a server reached by url:; a server claw starts gets "
                f"environment variables instead, e.g. env: [{variables}]",
            )
        )
    for index, variable in enumerate(server.env):
        if variable in keys:
            problems.append(
                source.problem(
                    (*at, "env", index),
                    f"{variable} holds the API key of provider {keys[variable]!r}, which never "
                    "reaches an MCP server; pass only what the server needs",
                )
            )
    return problems


def _http(
    at: KeyPath, server: McpServer, written: dict[str, Any], source: YamlSource
) -> list[Problem]:
    problems = [
        source.problem(
            (*at, key),
            f"{key} is for a server claw starts (command:); an HTTP server is not started by "
            "claw: it runs where its URL points, outside claw's sandbox, with its own "
            "environment and network",
        )
        for key in _STDIO_ONLY
        if key in written
    ]
    url = server.url or ""
    if server.headers_env and urllib.parse.urlsplit(url).scheme == "http" and not _loopback(url):
        problems.append(
            source.problem(
                (*at, "url"),
                f"{url!r} is plain http:// to another machine: the headers of headers_env "
                f"({', '.join(server.headers_env.values())}) would travel in clear; use "
                "https:// (plain http:// only to this machine: localhost, 127.0.0.1, ::1)",
            )
        )
    return problems


def _loopback(url: str) -> bool:
    import ipaddress  # only for a clawfile with a secret over plain http

    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _references(config: Clawfile, source: YamlSource) -> list[Problem]:
    """Every server `tools:` (of a task or `defaults:`) and `untrusted.allow` name is
    declared; a grant names a tool its task has. The lists are read as written, so that a
    name is checked even when another of its list failed validation; a server whose entry
    failed is declared still: it is not reported twice."""
    declared = [str(n) for n in source.data.get("mcp_servers") or {}]
    found: dict[KeyPath, Problem] = {}  # a default's problem once, not once per task

    def undeclared(at: KeyPath, tools: object) -> None:
        for index, tool in enumerate(tools if isinstance(tools, list) else []):
            server = _server(tool) if isinstance(tool, str) else None
            if server is not None and server not in declared:
                problem = source.problem((*at, index), _unknown(server, declared))
                found.setdefault((*at, index), problem)

    defaults = source.data.get("defaults")
    if isinstance(defaults, dict):
        undeclared(("defaults", "tools"), defaults.get("tools"))
    for name, task in config.tasks.items():
        written = source.data["tasks"][name]
        undeclared(("tasks", name, "tools"), written.get("tools"))
        allow: KeyPath = ("tasks", name, "untrusted", "allow")
        undeclared(allow, list(task.untrusted_allow))
        if not _tools_kept(source, name, task.tool_names):
            continue  # what the task has is not known: its tools: failed validation
        offered = task.offered_tools
        for index, tool in enumerate(task.untrusted_allow):
            if _server(tool) in declared and not _covers(offered, tool):
                message = (
                    f"{tool} is not one of this task's tools ({', '.join(offered) or 'none'}): "
                    "there is nothing to grant"
                )
                found.setdefault((*allow, index), source.problem((*allow, index), message))
    return list(found.values())


def _tools_kept(source: YamlSource, task: str, tools: tuple[str, ...]) -> bool:
    """Whether the task's `tools:` (its own, or that of `defaults:`) passed validation."""
    at = _where(source, task, "tools")
    written = source.data["tasks"][task] if at[0] == "tasks" else source.data.get("defaults")
    raw = written.get("tools") if isinstance(written, dict) else None
    return raw is None or (isinstance(raw, list) and set(tools) <= set(raw))


def _unknown(server: str, declared: list[str]) -> str:
    if not declared:
        return (
            f"no MCP server {server!r} in mcp_servers (none is declared: add it, e.g. "
            f"mcp_servers: {{{server}: {{command: [...]}}}})"
        )
    close = difflib.get_close_matches(server, declared, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"no MCP server {server!r} in mcp_servers (declared: {', '.join(declared)}{hint})"


def _server(tool: str) -> str | None:
    """The server an MCP tool name names (None for a built-in tool)."""
    if not names.is_mcp(tool):
        return None
    try:
        return names.split(tool)[0]
    except ValueError:
        return None  # refused by validation already


def _covers(tools: Iterable[str], granted: str) -> bool:
    """Whether a task with `tools` has some tool the grant `granted` (`mcp.S.T`) names."""
    server, pattern = names.split(granted)
    for tool in tools:
        if _server(tool) == server:
            glob = names.split(tool)[1]
            if fnmatch.fnmatchcase(pattern, glob) or fnmatch.fnmatchcase(glob, pattern):
                return True
    return False


def _where(source: YamlSource, task: str, key: str) -> KeyPath:
    """Where a task's setting is written: in the task, or else in `defaults:`."""
    written = source.data["tasks"][task]
    return ("tasks", task, key) if key in written else ("defaults", key)

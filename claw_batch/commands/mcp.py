"""`claw mcp list [SERVER]`: each declared MCP server started, its tools and their input
schemas listed, and what failed said (claw_batch.mcp.survey)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from claw_batch.commands.common import handle_errors, load, project_options, stop_on_sigterm
from claw_batch.errors import UsageError, said
from claw_batch.figures import count
from claw_batch.safety.onscreen import visible

if TYPE_CHECKING:
    from claw_batch.mcp.survey import Survey


@click.group()
def mcp() -> None:
    """List MCP servers' tools, or say why not.

    The servers are those of `mcp_servers:` in the clawfile (README: MCP servers).
    """


@mcp.command(name="list")
@click.argument("server", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@project_options
@handle_errors
def list_servers(
    server: str | None, as_json: bool, directory: Path | None, file: Path | None
) -> int:
    """Start the MCP servers, list their tools and schemas.

    Each declared server, or only SERVER, is started and asked for its tools. Says per
    server what failed (it does not start, its handshake timed out, it crashed), and which
    `mcp.SERVER.TOOL` names in the tasks name no tool of their server; exits 1 if anything
    failed. Each server's stderr is kept in .claw/mcp/SERVER.log.

    \b
    Examples:
      claw mcp list
      claw mcp list git --json
    """
    from claw_batch.mcp.survey import survey

    stop_on_sigterm()  # the servers are stopped on the way out
    project = load(directory, file)
    declared = project.config.mcp_servers
    if server is not None and server not in declared:
        known = ", ".join(declared) or "none"
        raise UsageError(f"no MCP server {server!r} in mcp_servers: (declared: {known})")
    found = survey(project.root, project.config, os.environ, server)
    # What a server says (names, descriptions, its stderr) is shown, never obeyed by the
    # terminal: control characters as \xNN (the JSON escapes them itself); the hub's secrets
    # are redacted from all of it already (claw_batch.mcp.hub).
    for note in found.notes:
        click.echo(said(visible(f"warning: {note}")), err=True)
    if as_json:
        click.echo(json.dumps(as_document(found), indent=2))
    else:
        for line in listing(found):
            click.echo(visible(line))
    for line in problems(found):
        click.echo(said(visible(line)), err=True)
    return 1 if found.failed or found.missing else 0


def listing(found: Survey) -> Iterator[str]:
    """The text of `claw mcp list`: per server its tools and their parameters, or why not."""
    if not found.servers:
        yield "no MCP servers declared (mcp_servers: in the clawfile)"
    for server in found.servers:
        how = server.kind
        if server.kind == "stdio":
            how += ", sandboxed" if server.sandboxed else ", unsandboxed"
        if server.failure is not None:
            yield f"{server.server} ({how}): failed"
            continue
        yield f"{server.server} ({how}): {count(len(server.tools), 'tool')}"
        for tool in server.tools:
            summary = tool.description.strip().splitlines()[0] if tool.description else ""
            yield f"  {tool.name}" + (f"  {summary}" if summary else "")
            yield from (f"      {line}" for line in parameters(tool.schema))


def problems(found: Survey) -> Iterator[str]:
    """What failed: a server (and why), a task's name for a tool that does not exist."""
    for server in found.failed:
        yield f"mcp_servers.{server.server}: {server.failure}"
    yield from found.missing


def parameters(schema: Mapping[str, Any]) -> Iterator[str]:
    """An input schema's properties, one a line: `name: type (required)  description`."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    if not props:
        yield "(no parameters)"
    for name, prop in props.items():
        kind = _kind(prop)
        need = " (required)" if name in required else ""
        text = str(prop.get("description") or "").strip().splitlines()
        yield f"{name}: {kind}{need}" + (f"  {text[0]}" if text else "")


def _kind(prop: Mapping[str, Any]) -> str:
    if "type" in prop:
        kind = prop["type"]
        if kind == "array" and isinstance(prop.get("items"), dict):
            return f"array of {_kind(prop['items'])}"
        return kind if isinstance(kind, str) else " | ".join(map(str, kind))
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) for v in prop["enum"])
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " | ".join(_kind(p) for p in prop[key] if isinstance(p, dict))
    return "any"


def as_document(found: Survey) -> dict[str, Any]:
    return {
        "servers": [
            {
                "name": s.server,
                "kind": s.kind,
                "sandboxed": s.sandboxed,
                "ok": s.failure is None,
                "failure": s.failure,
                "tools": [
                    {"name": t.name, "description": t.description, "input_schema": t.schema}
                    for t in s.tools
                ],
            }
            for s in found.servers
        ],
        "missing": list(found.missing),
        "notes": list(found.notes),
    }

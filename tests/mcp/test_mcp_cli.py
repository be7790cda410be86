"""`claw mcp list [SERVER]` and `claw validate --mcp`, through the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import Result, make_project
from mcphelpers import NO_SANDBOX, SERVERS

from claw_batch.cli import main

if NO_SANDBOX and not os.environ.get("CI"):
    pytest.skip(f"no sandbox here: {NO_SANDBOX}", allow_module_level=True)

CLAWFILE = """
model: gpt-4o-mini
mcp_servers:
  tools: {command: [python, servers/tools.py]}
  time: {command: [python, -m, mcp_server_time]}
{more}
tasks:
  triage:
    prompt: "Triage."
    tools: [read, mcp.tools.echo, mcp.time.*{tools}]
"""


def project(root: Path, more: str = "", tools: str = "") -> Path:
    text = CLAWFILE.replace("{more}", more).replace("{tools}", tools)
    files = {f"servers/{p.name}": p.read_text() for p in SERVERS.glob("*.py")}
    return make_project(root, text, files)


def run(*argv: str) -> Result:
    r = CliRunner().invoke(main, list(argv), catch_exceptions=False)
    return Result(r.exit_code, r.stdout, r.stderr)


def test_mcp_list_starts_each_server_and_lists_its_tools(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    r = run("mcp", "list", "-C", str(root))
    assert r.exit_code == 0, r.stderr
    assert "tools (stdio, sandboxed): 5 tools" in r.stdout
    assert "  echo  Say the text back.\n      text: string (required)" in r.stdout
    assert "time (stdio, sandboxed): 2 tools" in r.stdout  # the published reference server
    assert "get_current_time" in r.stdout and "timezone: string (required)" in r.stdout


def test_mcp_list_json_has_the_input_schemas(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    r = run("mcp", "list", "tools", "--json", "-C", str(root))
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s["name"] for s in doc["servers"]] == ["tools"]
    echo = doc["servers"][0]["tools"][0]
    assert echo["name"] == "echo"
    assert echo["input_schema"]["properties"]["text"]["type"] == "string"


def test_mcp_list_says_what_failed_and_exits_1(tmp_path: Path) -> None:
    more = (
        "  silent: {command: [python, servers/silent.py], startup_timeout: 1}\n"
        "  git: {command: [uvx-not-installed, mcp-server-git]}"
    )
    root = project(tmp_path / "p", more, ", mcp.tools.ech")
    r = run("mcp", "list", "-C", str(root))
    assert r.exit_code == 1
    assert "silent (stdio, sandboxed): failed" in r.stdout
    assert "mcp_servers.silent: MCP server 'silent' did not answer its handshake" in r.stderr
    assert "mcp_servers.git: MCP server 'git': command not found" in r.stderr
    assert (
        "tasks.triage.tools[3]: mcp.tools.ech: no such tool on tools "
        "(it has: echo, add, pid, crash, hang)"
    ) in r.stderr


def test_mcp_list_of_an_unknown_server_is_a_usage_error(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    r = run("mcp", "list", "gti", "-C", str(root))
    assert r.exit_code == 2
    assert "no MCP server 'gti' in mcp_servers: (declared: tools, time)" in r.stderr


def test_validate_mcp_exits_2_on_a_missing_tool_and_0_when_all_is_there(tmp_path: Path) -> None:
    bad = project(tmp_path / "bad", tools=", mcp.tools.ech")
    r = run("validate", "--mcp", "-C", str(bad))
    assert r.exit_code == 2
    assert "tasks.triage.tools[3]: mcp.tools.ech: no such tool on tools" in r.stderr
    good = project(tmp_path / "good")
    r = run("validate", "--mcp", "-C", str(good))
    assert r.exit_code == 0, r.stderr
    assert "2 MCP servers: ok (7 tools)" in r.stderr
    assert run("validate", "-C", str(bad)).exit_code == 0  # without --mcp, no server starts

"""`mcp_servers:` entries and the MCP tool names of `tools:` and `untrusted.allow`, through
`claw validate`: every message asserted whole, exit 2 for an error, warnings on exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import claw, make_project


def validate(tmp_path: Path, clawfile: str, files: dict[str, str] | None = None) -> tuple[int, str]:
    root = make_project(tmp_path / "proj", clawfile, files)
    r = claw(root, "validate", "-q")
    return r.exit_code, r.stderr.strip()


def refused(tmp_path: Path, clawfile: str) -> str:
    """The error, each line without the CLI's `claw: `."""
    code, said = validate(tmp_path, clawfile)
    assert code == 2, said
    return "\n".join(line.removeprefix("claw: ") for line in said.splitlines())


SERVERS = """
    mcp_servers:
      git: {command: [uvx, mcp-server-git]}
      tracker: {url: "https://mcp.example.org/mcp", headers_env: {Authorization: TRACKER_TOKEN}}
"""


def test_a_valid_stdio_and_http_server_pass(tmp_path: Path) -> None:
    code, said = validate(
        tmp_path,
        SERVERS
        + """
    tasks:
      triage:
        prompt: Triage.
        tools: [read, mcp.git.git_log, mcp.tracker.*]
        untrusted: {allow: [mcp.tracker.*]}
    """,
    )
    assert (code, said) == (0, "")


# --- an entry's keys -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "{}",
            "clawfile.yaml:2: mcp_servers.s: missing command: or url: — command: [python, -m, "
            "mcp_server_time] starts a server in the sandbox, url: https://host/mcp reaches one "
            "over streamable HTTP",
        ),
        (
            "{command: [srv], url: 'https://h/mcp'}",
            "clawfile.yaml:2: mcp_servers.s: command: and url: both given: a server is started "
            "by claw (command:) or reached at its URL (url:), not both",
        ),
        (
            "{command: 'python server.py'}",
            "clawfile.yaml:2: mcp_servers.s.command: expected a list: the program, then each "
            "argument an item of its own, e.g. command: [python, -m, mcp_server_time] (no shell "
            "runs it)",
        ),
        (
            "{command: []}",
            "clawfile.yaml:2: mcp_servers.s.command: an empty command: name the program and its "
            "arguments, e.g. command: [python, -m, mcp_server_time]",
        ),
        (
            "{command: [python, '']}",
            "clawfile.yaml:2: mcp_servers.s.command[1]: an empty argument",
        ),
        (
            "{command: [srv], headers_env: {Authorization: TOKEN}}",
            "clawfile.yaml:2: mcp_servers.s.headers_env: headers_env is for a server reached by "
            "url:; a server claw starts gets environment variables instead, e.g. env: [TOKEN]",
        ),
        (
            "{url: 'https://h/mcp', env: [TOKEN]}",
            "clawfile.yaml:2: mcp_servers.s.env: env is for a server claw starts (command:); an "
            "HTTP server is not started by claw: it runs where its URL points, outside claw's "
            "sandbox, with its own environment and network",
        ),
        (
            "{url: 'https://h/mcp', network: true}",
            "clawfile.yaml:2: mcp_servers.s.network: network is for a server claw starts "
            "(command:); an HTTP server is not started by claw: it runs where its URL points, "
            "outside claw's sandbox, with its own environment and network",
        ),
        (
            "{url: 'https://h/mcp', sandbox: none}",
            "clawfile.yaml:2: mcp_servers.s.sandbox: sandbox is for a server claw starts "
            "(command:); an HTTP server is not started by claw: it runs where its URL points, "
            "outside claw's sandbox, with its own environment and network",
        ),
        (
            "{command: [srv], sandbox: docker}",
            "clawfile.yaml:2: mcp_servers.s.sandbox: expected 'bubblewrap' or 'none', got 'docker'",
        ),
        (
            "{command: [srv], timeout: 0}",
            "clawfile.yaml:2: mcp_servers.s.timeout: must be greater than 0, got 0",
        ),
        (
            "{command: [srv], startup_timeout: -1}",
            "clawfile.yaml:2: mcp_servers.s.startup_timeout: must be greater than 0, got -1",
        ),
        (
            "{command: [srv], timeout: .inf}",
            "clawfile.yaml:2: mcp_servers.s.timeout: expected a finite number, got inf",
        ),
        (
            "{url: 'http://mcp.example.org/mcp', headers_env: {Authorization: TOKEN}}",
            "clawfile.yaml:2: mcp_servers.s.url: 'http://mcp.example.org/mcp' is plain http:// "
            "to another machine: the headers of headers_env (TOKEN) would travel in clear; use "
            "https:// (plain http:// only to this machine: localhost, 127.0.0.1, ::1)",
        ),
        (
            "{url: 'https://h/mcp', headers: {Authorization: 'Bearer x'}}",
            "clawfile.yaml:2: mcp_servers.s: literal headers are refused (they carry secrets): "
            "name the environment variable that holds each one with headers_env: "
            "{Authorization: TRACKER_TOKEN}",
        ),
        (
            "{url: 'https://h/mcp', headers_env: {'Bad Header': TOKEN}}",
            "clawfile.yaml:2: mcp_servers.s.headers_env.Bad Header: 'Bad Header' is not the "
            "name of an HTTP header (letters, digits and '-')",
        ),
        (
            "{command: [srv], env: [OPENAI_API_KEY]}",
            "clawfile.yaml:2: mcp_servers.s.env[0]: OPENAI_API_KEY holds the API key of provider "
            "'openai', which never reaches an MCP server; pass only what the server needs",
        ),
    ],
    ids=[
        "neither",
        "both",
        "command-string",
        "command-empty",
        "command-empty-arg",
        "headers-env-on-stdio",
        "env-on-http",
        "network-on-http",
        "sandbox-on-http",
        "sandbox-unknown",
        "timeout-zero",
        "startup-timeout-negative",
        "timeout-inf",
        "secret-over-plain-http",
        "literal-headers",
        "header-name",
        "provider-key-in-env",
    ],
)
def test_an_entry_is_refused_with_where_and_why(tmp_path: Path, entry: str, expected: str) -> None:
    clawfile = f"mcp_servers:\n  s: {entry}\ntasks:\n  a: {{prompt: hi, tools: [mcp.s.*]}}\n"
    assert refused(tmp_path, clawfile) == expected


def test_a_declared_providers_key_is_never_passed_to_a_server(tmp_path: Path) -> None:
    clawfile = """
        providers:
          local: {base_url: "http://localhost:11434/v1", api_key_env: LOCAL_KEY}
        mcp_servers:
          s: {command: [srv], env: [HOME, LOCAL_KEY]}
        tasks:
          a: {prompt: hi, tools: [mcp.s.*]}
    """
    assert refused(tmp_path, clawfile) == (
        "clawfile.yaml:4: mcp_servers.s.env[1]: LOCAL_KEY holds the API key of provider "
        "'local', which never reaches an MCP server; pass only what the server needs"
    )


@pytest.mark.parametrize(
    "url", ["http://localhost:8000/mcp", "http://127.0.0.1:8000/mcp", "http://[::1]:8000/mcp"]
)
def test_a_secret_over_plain_http_to_this_machine_is_allowed(tmp_path: Path, url: str) -> None:
    clawfile = f"""
        mcp_servers:
          s: {{url: "{url}", headers_env: {{Authorization: TOKEN}}}}
        tasks:
          a: {{prompt: hi, tools: [mcp.s.*]}}
    """
    assert validate(tmp_path, clawfile) == (0, "")


def test_plain_http_without_a_secret_is_allowed(tmp_path: Path) -> None:
    clawfile = """
        mcp_servers:
          s: {url: "http://mcp.example.org/mcp"}
        tasks:
          a: {prompt: hi, tools: [mcp.s.*]}
    """
    assert validate(tmp_path, clawfile) == (0, "")


# --- server names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        (
            "my.git",
            "invalid MCP server name 'my.git': use letters, digits, '_' and '-', starting with "
            "a letter or digit (no '.': its tools are named mcp.SERVER.TOOL)",
        ),
        (
            "my__git",
            "invalid MCP server name 'my__git': no '__' in it and no '_' at its end: the model "
            "calls its tools SERVER__TOOL, which must split at the first '__'",
        ),
        (
            "git_",
            "invalid MCP server name 'git_': no '__' in it and no '_' at its end: the model "
            "calls its tools SERVER__TOOL, which must split at the first '__'",
        ),
        (
            "g" * 33,
            f"invalid MCP server name {'g' * 33!r}: 33 characters, at most 32: the model calls "
            "its tools SERVER__TOOL, which must fit the 64 characters of a tool name",
        ),
    ],
    ids=["dot", "double-underscore", "trailing-underscore", "too-long"],
)
def test_a_server_name_that_would_not_split_is_refused(tmp_path: Path, name: str, why: str) -> None:
    clawfile = f"mcp_servers:\n  {name}: {{command: [srv]}}\ntasks:\n  a: {{prompt: hi}}\n"
    assert refused(tmp_path, clawfile) == f"clawfile.yaml:2: mcp_servers.{name}: {why}"


def test_a_name_of_32_characters_with_dashes_and_underscores_is_fine(tmp_path: Path) -> None:
    name = "a-b_c" + "d" * 27
    clawfile = f"""
        mcp_servers:
          {name}: {{command: [srv]}}
        tasks:
          a: {{prompt: hi, tools: [mcp.{name}.x]}}
    """
    assert validate(tmp_path, clawfile) == (0, "")


# --- references ------------------------------------------------------------------------------


def test_an_undeclared_server_in_tools_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    clawfile = (
        SERVERS
        + """
    tasks:
      triage:
        prompt: Triage.
        tools: [read, mcp.git.git_log, mcp.trackr.*]
    """
    )
    assert refused(tmp_path, clawfile) == (
        "clawfile.yaml:8: tasks.triage.tools[2]: no MCP server 'trackr' in mcp_servers "
        "(declared: git, tracker; did you mean 'tracker'?)"
    )


def test_an_undeclared_server_without_any_declared(tmp_path: Path) -> None:
    clawfile = "tasks:\n  a: {prompt: hi, tools: [mcp.git.*]}\n"
    assert refused(tmp_path, clawfile) == (
        "clawfile.yaml:2: tasks.a.tools[0]: no MCP server 'git' in mcp_servers (none is "
        "declared: add it, e.g. mcp_servers: {git: {command: [...]}})"
    )


def test_an_undeclared_server_in_defaults_is_said_once(tmp_path: Path) -> None:
    clawfile = (
        SERVERS
        + """
    defaults:
      tools: [read, mcp.gti.*]
    tasks:
      a: {prompt: hi}
      b: {prompt: hi}
    """
    )
    assert refused(tmp_path, clawfile) == (
        "clawfile.yaml:6: defaults.tools[1]: no MCP server 'gti' in mcp_servers "
        "(declared: git, tracker; did you mean 'git'?)"
    )


def test_an_entry_that_failed_is_not_also_undeclared(tmp_path: Path) -> None:
    clawfile = """
        mcp_servers:
          git: {command: [uvx, mcp-server-git], timeout: 0}
        tasks:
          a: {prompt: hi, tools: [mcp.git.*]}
    """
    assert refused(tmp_path, clawfile) == (
        "clawfile.yaml:2: mcp_servers.git.timeout: must be greater than 0, got 0"
    )


def test_a_server_without_a_tool_part_is_refused_with_the_form(tmp_path: Path) -> None:
    clawfile = SERVERS + "tasks:\n  a: {prompt: hi, tools: [mcp.git]}\n"
    assert refused(tmp_path, clawfile) == (
        "clawfile.yaml:5: tasks.a.tools[0]: 'mcp.git': expected mcp.SERVER.TOOL or mcp.SERVER.*"
    )


def test_a_tool_part_with_odd_characters_is_refused(tmp_path: Path) -> None:
    clawfile = SERVERS + "tasks:\n  a: {prompt: hi, tools: ['mcp.git.git log']}\n"
    assert refused(tmp_path, clawfile) == (
        "clawfile.yaml:5: tasks.a.tools[0]: 'mcp.git.git log': a tool's name has letters, "
        "digits, '_', '-' and '.', and a pattern '*' and '?'"
    )


def test_an_undeclared_server_in_untrusted_allow_is_refused(tmp_path: Path) -> None:
    clawfile = (
        SERVERS
        + """
    tasks:
      a:
        prompt: hi
        tools: [mcp.tracker.*]
        untrusted: {allow: [mcp.trackr.*]}
    """
    )
    assert refused(tmp_path, clawfile) == (
        "clawfile.yaml:9: tasks.a.untrusted.allow[0]: no MCP server 'trackr' in mcp_servers "
        "(declared: git, tracker; did you mean 'tracker'?)"
    )


def test_a_grant_of_a_tool_the_task_has_not_is_refused(tmp_path: Path) -> None:
    clawfile = (
        SERVERS
        + """
    tasks:
      a:
        prompt: hi
        tools: [read, mcp.git.git_log]
        untrusted: {allow: [mcp.git.git_log, mcp.git.*, mcp.git.git_commit, mcp.tracker.*]}
    """
    )
    assert refused(tmp_path, clawfile) == "\n".join(
        f"clawfile.yaml:9: tasks.a.untrusted.allow[{i}]: {tool} is not one of this task's "
        "tools (read, mcp.git.git_log): there is nothing to grant"
        for i, tool in ((2, "mcp.git.git_commit"), (3, "mcp.tracker.*"))
    )


# --- warnings ---------------------------------------------------------------------------------


def test_an_unused_server_is_a_warning(tmp_path: Path) -> None:
    clawfile = SERVERS + "tasks:\n  a: {prompt: hi, tools: [mcp.git.*]}\n"
    assert validate(tmp_path, clawfile) == (
        0,
        "claw: clawfile.yaml:3: mcp_servers.tracker: warning: no task uses MCP server "
        "'tracker': name its tools in a task's tools:, e.g. mcp.tracker.*",
    )


def test_granting_a_read_only_servers_tools_is_a_warning(tmp_path: Path) -> None:
    clawfile = """
        mcp_servers:
          glossary: {command: [srv], read_only: true}
        tasks:
          a:
            prompt: hi
            tools: [mcp.glossary.*]
            untrusted: {allow: [mcp.glossary.*]}
    """
    assert validate(tmp_path, clawfile) == (
        0,
        "claw: clawfile.yaml:7: tasks.a.untrusted.allow[0]: warning: MCP server 'glossary' "
        "is read_only: true: a job that read outside content keeps its tools anyway, so "
        "this grants nothing",
    )

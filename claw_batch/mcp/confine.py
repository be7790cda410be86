"""How a stdio server is started: in the same bubblewrap sandbox as bash (project read-only
but for the write directories of the tasks that use it, protected paths never writable,
`.claw/` hidden, no network unless its entry says `network: true`, no capability, as nobody
when claw is root), or as it is with `sandbox: none` on its entry.

Its environment is a fixed base and the names its entry lists in `env:`, never a provider's
API key. Its interpreter must be reachable inside: claw's own Python environment is mounted
read-only and its bin/ is first on PATH, so `command: [python, -m, mcp_server_time]` runs the
server installed next to claw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from claw_batch.config import McpServer
from claw_batch.errors import ToolError
from claw_batch.safety.paths import Policy
from claw_batch.sandbox import bubblewrap, host
from claw_batch.sandbox.command import Command

SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")
SYSTEM_DIRS = ("/usr", *(f"/{n}" for n in host.TOP_LINKS), "/etc")  # host.system's mounts
CPU_SECONDS = 24 * 3600  # RLIMIT_CPU of a server: it lives as long as the run
UNSANDBOXED = "none"
REFUSAL = (
    "MCP server {name!r} is refused: no sandbox can be started here ({why}); install "
    "bubblewrap, or let it run unsandboxed with `sandbox: none` on its entry"
)


class Refused(ToolError):
    """A server claw will not start: the message says why and what to do."""


def python_dirs() -> tuple[str, ...]:
    """claw's own Python environment, the installation it was made from (both needed to run
    its `python`) and the package folders on its path (PYTHONPATH's site-packages), unless
    the system's mounts hold them already."""
    packages = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    given = dict.fromkeys((sys.prefix, sys.base_prefix, *packages))
    found = dict.fromkeys(os.path.realpath(p) for p in given if os.path.isdir(p))
    return tuple(p for p in found if not any(host.under(p, d) for d in SYSTEM_DIRS))


def search_path(sandboxed: bool, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Where the server's command is looked for: claw's environment's bin/ first, then the
    system's (in the sandbox) or the runner's PATH (unsandboxed)."""
    rest = SYSTEM_PATH if sandboxed else tuple(environ.get("PATH", os.defpath).split(":"))
    return tuple(dict.fromkeys((os.path.join(sys.prefix, "bin"), *rest)))


def environment(
    name: str,
    entry: McpServer,
    environ: Mapping[str, str],
    secrets: Collection[str],
    *,
    sandboxed: bool,
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The server's environment, and a note for each listed name it does not get (a
    provider's API key, however it is listed)."""
    env = {
        "PATH": ":".join(search_path(sandboxed, environ)),
        "HOME": "/tmp" if sandboxed else environ.get("HOME", "/tmp"),
        "LANG": environ.get("LANG", "C.UTF-8"),
        "PYTHONDONTWRITEBYTECODE": "1",
        # Neither the project root (the working directory of `python -m`) nor a script's
        # folder goes first on a Python server's import path: a job that may write `*.py`
        # there cannot plant a module (`anyio.py`) that the server would import (3.11+).
        "PYTHONSAFEPATH": "1",
    }
    notes = []
    for var in entry.env:
        if var in secrets:
            notes.append(
                f"mcp_servers.{name}.env: {var} is a provider's API key: the server does "
                "not get it (a model's key is never given to a tool)"
            )
        elif var in environ:
            env[var] = environ[var]
    return env, tuple(notes)


@contextlib.contextmanager
def command(
    name: str,
    entry: McpServer,
    root: Path,
    *,
    policy: Policy | None,
    environ: Mapping[str, str],
    secrets: Collection[str],
) -> Iterator[tuple[Command, tuple[str, ...]]]:
    """The server's command line, confined as its entry says, with its notes; the context
    keeps what the sandbox needs open until the server has started. Refused when it cannot
    be started as declared."""
    sandboxed = entry.sandbox != UNSANDBOXED
    env, notes = environment(name, entry, environ, secrets, sandboxed=sandboxed)
    _found(name, entry.command, env["PATH"].split(":"), root, sandboxed)
    plain = Command(tuple(entry.command), env)
    if not sandboxed:
        yield plain, notes
        return
    why = bubblewrap.unavailable(os.geteuid() == 0)
    if why is not None:
        raise Refused(REFUSAL.format(name=name, why=why))
    box = bubblewrap.for_job(policy or Policy(root), network=entry.network)
    real = str(box.root)
    python = tuple(d for d in python_dirs() if not host.under(d, real))
    box = dataclasses.replace(box, outside=(*box.outside, *python))
    with box.command(plain, cwd=box.root, seconds=CPU_SECONDS) as confined:
        yield confined, notes


def _found(name: str, argv: tuple[str, ...], path: list[str], root: Path, sandboxed: bool) -> None:
    """Refused, saying where claw looked and what to do, when the command is not there (in
    the sandbox: not where the sandbox sees it)."""
    program = argv[0]
    visible = (*SYSTEM_DIRS, *python_dirs(), str(root.resolve()))
    if "/" in program:
        target = os.path.realpath(root / program)
        seen = not sandboxed or any(host.under(target, d) for d in visible)
        if seen and os.access(target, os.X_OK) and os.path.isfile(target):
            return
        where = f"{program} (from the project root)"
    else:
        for folder in path:
            if sandboxed and not any(host.under(folder, d) for d in visible):
                continue
            candidate = os.path.join(folder, program)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return
        where = f"{program} in {':'.join(path)}"
    inside = (
        "the sandbox sees the system (/usr, /etc), claw's Python environment "
        f"({sys.prefix}) and the project, read-only; install the server into claw's "
        "environment (pip install), give a path inside the project, or run it unsandboxed "
        "with `sandbox: none` on its entry"
        if sandboxed
        else "install it, or give its full path"
    )
    raise Refused(f"MCP server {name!r}: command not found: claw looked for {where}; {inside}")

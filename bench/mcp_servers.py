"""MCP servers (issue 19): what a stdio server costs a run — its start (the process, the
sandbox, the handshake and its tool list), one tool call, and its stop — in the bubblewrap
sandbox and unsandboxed (`sandbox: none`), and what a no-op of a project whose task uses a
server pays for it (the tool lists come from .claw/mcp/catalog.json: no server starts).

The server is the example's own (servers/glossary.py, a real stdio server built on the SDK),
started through claw's hub as a run starts it; its `lookup` tool is called N times in a row.
The no-op is `claw run --replay` of a fresh copy of the example project (whose nightly summary
uses the server) once every job is up to date: median of R runs; it starts no server and
imports neither the SDK nor asyncio (tests/mcpwire/test_mcp_run.py checks the imports).

    python bench/mcp_servers.py [--calls 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, example_project, machine, median, ms, scratch, table, use_repo

use_repo()

from claw_batch.config import McpServer  # noqa: E402
from claw_batch.mcp.hub import Hub  # noqa: E402

COMMAND = ("python", "servers/glossary.py", "servers/glossary.md")


def project() -> Path:
    with scratch() as folder:
        root = example_project(Path(folder) / "example")
    shutil.copytree(REPO / "servers", root / "servers")
    shutil.copytree(REPO / "cassettes", root / "cassettes")
    return root


def server_costs(root: Path, sandbox: str, calls: int) -> tuple[float, float, float]:
    """(start to a listed tool, one call, stop), in seconds."""
    entry = McpServer(command=COMMAND, read_only=True, sandbox=sandbox)
    started = time.perf_counter()
    hub = Hub(root, {"glossary": entry}, dict(os.environ))
    try:
        hub.tools("glossary")
        listed = time.perf_counter() - started
        begun = time.perf_counter()
        for _ in range(calls):
            hub.call("glossary", "lookup", {"term": "freeze"}, timeout=60)
        per_call = (time.perf_counter() - begun) / calls
    finally:
        stopping = time.perf_counter()
        hub.close()
    return listed, per_call, time.perf_counter() - stopping


def noop(root: Path, repeat: int) -> float:
    """The median wall time of `claw run --replay` when every job is up to date."""
    argv = [sys.executable, "-m", "claw_batch", "run", "--replay", "-q"]
    env = {**os.environ, "CLAW_NOW": "2026-11-22T23:00:00+01:00"}
    subprocess.run(argv, cwd=root, env=env, check=True, capture_output=True)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, cwd=root, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for sandbox in ("bubblewrap", "none"):
        listed, per_call, stop = server_costs(project(), sandbox, args.calls)
        rows.append([f"server, sandbox: {sandbox}", ms(listed, 0), ms(per_call, 2), ms(stop, 0)])
    print(f"machine: {machine()}\n")
    print(table(["", "start + list (ms)", "one call (ms)", "stop (ms)"], rows))
    print()
    print(
        table(
            [
                "no-op `claw run --replay` of the example (its summary uses the server)",
                "median (ms)",
            ],
            [
                [
                    "every job up to date: tool lists from the catalog, no server",
                    ms(noop(project(), args.repeat), 0),
                ]
            ],
        )
    )


if __name__ == "__main__":
    main()

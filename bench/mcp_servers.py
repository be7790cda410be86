"""MCP servers (issue 19): what a stdio server costs a run — its start (the process, the
sandbox, the handshake and its tool list), one tool call, and its stop — in the bubblewrap
sandbox and unsandboxed (`sandbox: none`), and what a no-op of a project whose task uses a
server pays for it (the tool lists come from .claw/mcp/catalog.json: no server starts).

The server is the example's own (servers/glossary.py, a real stdio server built on the SDK),
started through claw's hub as a run starts it; its `lookup` tool is called N times in a row.
The headline is whole `claw` processes on a fresh copy of the example project, as a user
times them: `claw run --replay` once every job is up to date (its summary uses the server; it
must start none: the server's log must not appear) and `claw mcp list`; median of R runs.
The hub's numbers follow as a slice.

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


def whole(root: Path, argv: list[str], repeat: int, warm: bool) -> float:
    """The median wall time of a whole `claw` process, as a user times it (start-up
    included); `warm`: one run first, untimed (for a no-op: every job up to date)."""
    argv = [sys.executable, "-m", "claw_batch", *argv]
    env = {**os.environ, "CLAW_NOW": "2026-11-22T23:00:00+01:00"}
    if warm:
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
    print(f"machine: {machine()}\n")
    root = project()
    noop = whole(root, ["run", "--replay", "-q"], args.repeat, warm=True)
    started = (root / ".claw/mcp/glossary.log").exists()
    listing = whole(root, ["mcp", "list"], args.repeat, warm=False)
    none = "none set (issue 19 names no benchmark)"
    print(
        table(
            ["whole `claw` process, the example project", "median (ms)", "goal", "met"],
            [
                [
                    "`claw run --replay`, every job up to date (the summary uses the server)",
                    ms(noop, 0),
                    "starts no server",
                    "no" if started else "yes",
                ],
                [
                    "`claw mcp list` (start the server in the sandbox, list, stop)",
                    ms(listing, 0),
                    none,
                    "-",
                ],
            ],
        )
    )
    rows = []
    for sandbox in ("bubblewrap", "none"):
        listed, per_call, stop = server_costs(project(), sandbox, args.calls)
        rows.append([f"server, sandbox: {sandbox}", ms(listed, 0), ms(per_call, 2), ms(stop, 0)])
    print("\nA slice: the hub inside one process (no claw start-up), the same server.\n")
    print(table(["", "start + list (ms)", "one call (ms)", "stop (ms)"], rows))


if __name__ == "__main__":
    main()

"""What the bubblewrap sandbox costs per bash call.

The bash tool (`claw_batch.tools.registry.TOOLS["bash"]`) runs `true`, then `git status`, in a
small git repository: unsandboxed (`sandbox: none`), and sandboxed each way it can start
(as root: "privileged", the command as nobody in the project's id-mapped mount namespace;
and "userns", as a runner that is not root). A third row per mode writes the whole project
(`write: ["**"]`) with the protected paths of issue 14, some missing, so that the root is
sealed (each of its entries bound again). The first sandboxed call of a process also pays
the probe (one `bwrap ... true`), the walk of /etc and, as root, the id-mapped namespace; it
is shown apart. The difference of the medians is the cost.

    python bench/sandbox.py [--calls 50]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from _common import machine, median, ms, p90, table, use_repo

use_repo()

from claw_batch.safety.childenv import scrubbed_env  # noqa: E402
from claw_batch.safety.paths import Policy  # noqa: E402
from claw_batch.sandbox import bubblewrap as sandbox  # noqa: E402
from claw_batch.tools.base import ToolContext  # noqa: E402
from claw_batch.tools.registry import TOOLS  # noqa: E402

PROTECTED = (
    *("clawfile.yaml", "prompts", "skills", "workspace/skills", "workspace/memory"),
    *(f"workspace/{name}.md" for name in ("AGENTS", "SOUL", "USER", "IDENTITY", "MEMORY")),
    *(".git", ".claw", ".gitignore", ".ignore", ".rgignore"),
)


def context(root: Path, mode: str, write: tuple[str, ...] = ("out/**",)) -> ToolContext:
    policy = Policy(root, write_globs=write, protected=PROTECTED)
    box = None
    if mode != "none":
        box = sandbox.for_job(policy, network=False)
        box = dataclasses.replace(box, privileged=mode == "privileged")
    return ToolContext(root, policy, scrubbed_env(), time.monotonic() + 3600, True, box)


def timed(ctx: ToolContext, command: str, calls: int) -> list[float]:
    arguments = json.dumps({"command": command})
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        out = TOOLS["bash"].invoke(ctx, arguments)
        times.append(time.perf_counter() - started)
        assert out.startswith("exit code 0"), out
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    calls = parser.parse_args().calls
    modes = ["none", "privileged", "userns"] if os.geteuid() == 0 else ["none", "userns"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        for rel in ("README.md", "clawfile.yaml", "prompts/p.md", "workspace/AGENTS.md"):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("hello\n")
        rows, first = [], []
        for mode in modes:
            ctx = context(root, mode)
            started = time.perf_counter()
            timed(ctx, "true", 1)
            first.append((mode, time.perf_counter() - started))
            for command in ("true", "git status --short"):
                times = timed(ctx, command, calls)
                rows.append([mode, "out/**", f"`{command}`", ms(median(times)), ms(p90(times))])
            if mode != "none":
                times = timed(context(root, mode, ("**",)), "true", calls)
                rows.append([mode, "** (sealed)", "`true`", ms(median(times)), ms(p90(times))])
    print(machine())
    print(f"{calls} calls each\n")
    print(table(["sandbox", "write", "command", "median ms", "p90 ms"], rows))
    print("\nfirst call of the process (probe, /etc walk, id-mapped namespace included):")
    print(", ".join(f"{mode} {ms(seconds)} ms" for mode, seconds in first))


if __name__ == "__main__":
    main()

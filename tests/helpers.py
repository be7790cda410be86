"""Small projects on disk and the `claw` CLI run against them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from claw_batch.cli import main

WORKSPACE = {
    "workspace/AGENTS.md": "# Agents\nBe brief.\n",
    "workspace/SOUL.md": "Calm.\n",
    "workspace/USER.md": "The user likes lists.\n",
    "workspace/MEMORY.md": "- key: value\n",
}


def make_project(root: Path, clawfile: str, files: Mapping[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "clawfile.yaml").write_text(textwrap.dedent(clawfile).lstrip())
    for rel, content in {**WORKSPACE, **(files or {})}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content))
    return root


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str


def claw(root: Path, *args: str, env: Mapping[str, str] | None = None) -> Result:
    """Run the CLI in-process (fast), as `claw -C root ...`-style invocations would."""
    command, *rest = args
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        r = CliRunner().invoke(main, [command, "-C", str(root), *rest], catch_exceptions=False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Result(r.exit_code, r.stdout, r.stderr)


def claw_process(
    root: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real `claw` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "claw_batch", *args],
        cwd=root,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )

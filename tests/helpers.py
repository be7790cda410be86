"""Small projects on disk and the `claw` CLI run against them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from claw_batch.cli import main

# "Never a timed assertion in a test": on a loaded 2-core CI machine a step that takes 50 ms
# alone can take seconds, so no test asserts that something is fast. What a test may assert is
# that something did not wait for a hang: the fakes hang for HANG seconds (or longer, or until
# the test ends), and a third of that is far more than any slowness of the machine, yet far
# less than the hang. Better still, where the code offers a seam, a test tells it without a
# clock (the hung reply still hangs, the busy thread is still busy, the waiter was told).
HANG = 30.0
NOT_HELD_UP = HANG / 3  # `assert since(started) < NOT_HELD_UP`: did not wait for a hang


def since(started: float) -> float:
    """Seconds since `started` (a time.monotonic())."""
    return time.monotonic() - started


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


# A runner that is not root, for tests run as root: what claw does for most people.
RUNNER = 4242
AS_RUNNER = ("setpriv", f"--reuid={RUNNER}", f"--regid={RUNNER}", "--clear-groups")


def runner_env() -> dict[str, str]:
    """An environment in which the runner's Python imports this claw and its dependencies."""
    import claw_batch

    site = [p for p in sys.path if p.endswith("site-packages")]
    checkout = str(Path(claw_batch.__file__).parent.parent)
    return {"PATH": os.environ["PATH"], "PYTHONPATH": ":".join([checkout, *site])}


def runner_python(env: Mapping[str, str]) -> str | None:
    """An interpreter the runner may start that imports this claw (ours may live in a home
    only root may enter); None when there is none."""
    for exe in dict.fromkeys((sys.executable, "/usr/bin/python3")):
        check = [*AS_RUNNER, exe, "-c", "import claw_batch, pydantic_core, openai"]
        if subprocess.run(check, env=env, capture_output=True).returncode == 0:
            return exe
    return None

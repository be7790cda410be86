"""The `claw` program itself: how it exits."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import make_project

WATCHING = """
    version: 1
    model: fake-model
    tasks:
      triage:
        prompt: "Triage {{ read(item.path) }}"
        watch: ["inbox/*.txt"]
        output: "out/{{ item.stem }}.md"
        tools: []
"""

# `python -m claw_batch ARGS`, and then, from an atexit handler (after claw is done, before
# the interpreter's own shutdown), how many objects its last garbage collection will skip.
FROZEN = (
    "import atexit, gc, runpy, sys\n"
    "atexit.register(lambda: print('frozen:', gc.get_freeze_count(), file=sys.stderr))\n"
    "runpy.run_module('claw_batch', run_name='__main__', alter_sys=True)\n"
)


def test_sigterm_to_claw_watch_exits_without_the_interpreters_last_collection(
    tmp_path: Path,
) -> None:
    """Issue 16, point 13: an idle `claw watch` took 1.5-3.5 s to exit after SIGTERM on busy
    cores. Its stop itself takes milliseconds; the time went to the interpreter's shutdown,
    whose last garbage collection walks every object openai and pydantic left (0.18 s of
    CPU on an idle core). claw's entry point freezes them out of it once claw is done."""
    root = make_project(tmp_path / "p", WATCHING, {"inbox/.keep": ""})
    child = subprocess.Popen(
        [sys.executable, "-c", FROZEN, "watch"], cwd=root, stderr=subprocess.PIPE, text=True
    )
    assert child.stderr is not None
    assert "claw watch: triage (inbox/*.txt)" in child.stderr.readline()
    sent = time.monotonic()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    print(f"exited {time.monotonic() - sent:.3f} s after SIGTERM")  # for -s; not asserted
    assert child.returncode == 0, err
    assert "claw watch: stopped" in err
    frozen = int(err.rpartition("frozen: ")[2])
    assert frozen > 10_000  # claw's and its libraries' objects: a whole heap, not a few


def test_the_claw_command_is_the_entry_point_python_m_runs() -> None:
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    scripts = pyproject.partition("[project.scripts]\n")[2].partition("\n\n")[0]
    assert scripts == 'claw = "claw_batch.cli:entry"'

"""The quick check of a large task on two cores (plan.halves): the forked child's half is
checked as closely as this process's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, echo_prompt
from helpers import claw, make_project

from claw_batch.plan.halves import MIN_SPLIT, all_in_halves

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      notes:
        foreach: "inbox/*.txt"
        prompt: "Note for {{ item.path }}"
        output: "out/{{ item.stem }}.md"
        tools: [read]
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        srv.handler = echo_prompt
        yield srv


def statuses(root: Path, env: dict[str, str]) -> dict[str, str]:
    """`claw run --json` in a process of its own: one thread, so it may fork (this one runs
    the fake server's)."""
    done = subprocess.run(
        [sys.executable, "-m", "claw_batch", "run", "--json"],
        cwd=root,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return {j["item"]: j["status"] for j in json.loads(done.stdout)["jobs"]}


def test_a_change_in_the_forked_half_still_reruns_its_job(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    items = {f"inbox/{n:04}.txt": f"item {n:04}\n" for n in range(MIN_SPLIT)}
    root = make_project(tmp_path / "p", CLAWFILE, items)
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
    assert claw(root, "run", "-q", "-j", "8", env=env).exit_code == 0
    up = dict.fromkeys(items, "up-to-date")
    assert statuses(root, env) == up

    last = root / "inbox" / f"{MIN_SPLIT - 1:04}.txt"  # the child's half
    before = last.stat()
    last.write_text(last.read_text().upper())  # as many bytes, in place, the same second
    os.utime(last, ns=(before.st_atime_ns, before.st_mtime_ns + 1))
    assert statuses(root, env) == {**up, f"inbox/{MIN_SPLIT - 1:04}.txt": "ok"}
    assert statuses(root, env) == up

    (root / "out" / f"{MIN_SPLIT - 1:04}.md").unlink()
    assert statuses(root, env) == {**up, f"inbox/{MIN_SPLIT - 1:04}.txt": "ok"}


@pytest.mark.parametrize("failing", [None, 0, MIN_SPLIT - 1])
def test_either_half_can_say_no(failing: int | None) -> None:
    def holds(start: int, end: int) -> bool:
        return failing is None or not start <= failing < end

    assert all_in_halves(holds, MIN_SPLIT) is (failing is None)


CTRL_C_IN_THE_CHILD = """
import os, signal
from claw_batch.plan import halves
halves.usable_cores = lambda: 2
real_fork = os.fork
def fork():  # Ctrl-C reaches the child (the terminal signals the process group) at once
    pid = real_fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGINT)
    return pid
os.fork = fork
parent = os.getpid()
try:
    print("holds" if halves.all_in_halves(lambda a, b: True, 4000) else "does not hold")
except KeyboardInterrupt:
    print("the parent's handler ran in", "the parent" if os.getpid() == parent else "the child")
"""


def test_ctrl_c_in_the_forked_child_never_runs_the_parents_handlers() -> None:
    """The child shares the parent's stack: a KeyboardInterrupt raised in it would run the
    run's except clauses (the ledger, summary.json, the daily note) in a second process."""
    out = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_THE_CHILD], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.splitlines() == ["holds"], out.stdout + out.stderr

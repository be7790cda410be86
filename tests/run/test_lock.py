"""The project lock, between real processes: one holder, no stale locks, waiting, a race."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from helpers import HANG, NOT_HELD_UP, since

from claw_batch.errors import Locked
from claw_batch.run.lock import ProjectLock, read_holder

# Holds the lock for argv[2] seconds, or until its stdin closes.
HOLD = """
import select, sys
from pathlib import Path
from claw_batch.run.lock import ProjectLock
with ProjectLock(Path(sys.argv[1]), argv="claw run nightly"):
    print("held", flush=True)
    select.select([sys.stdin], [], [], float(sys.argv[2]))
"""

# Every racer starts, says "ready", waits for "go" on stdin and tries once; the winner keeps
# the lock until its stdin closes, so that no loser can come after it.
RACE = """
import sys
from pathlib import Path
from claw_batch.errors import Locked
from claw_batch.run.lock import ProjectLock
print("ready", flush=True)
sys.stdin.readline()
try:
    with ProjectLock(Path(sys.argv[1])):
        print("ok", flush=True)
        sys.stdin.read()
except Locked:
    print("locked", flush=True)
"""

Spawn = Callable[..., subprocess.Popen[str]]
Hold = Callable[[float], subprocess.Popen[str]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    procs: list[subprocess.Popen[str]] = []

    def start(script: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream:
                stream.close()


@pytest.fixture
def hold(spawn: Spawn, tmp_path: Path) -> Hold:
    """A child process that holds tmp_path's lock for `seconds` (or until its stdin is
    closed), once it has said so."""

    def start(seconds: float) -> subprocess.Popen[str]:
        proc = spawn(HOLD, str(tmp_path), str(seconds))
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        return proc

    return start


def minutes(started: str) -> str:
    """The label's ISO time (2026-11-27T03:04:05+01:00) as messages show it: 2026-11-27 03:04."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", started), started
    return started[:16].replace("T", " ")


def test_a_second_run_is_told_who_holds_the_lock(tmp_path: Path, hold: Hold) -> None:
    proc = hold(30)
    holder = read_holder(tmp_path)
    assert holder is not None and holder.pid == proc.pid
    with pytest.raises(Locked) as e, ProjectLock(tmp_path):
        pytest.fail("acquired a held lock")
    assert str(e.value) == (
        f"locked by pid {proc.pid} since {minutes(holder.started)} (claw run nightly); "
        "wait for it or use --wait"
    )
    assert e.value.exit_code == 75


def test_kill_9_frees_the_lock_at_once(tmp_path: Path, hold: Hold) -> None:
    proc = hold(30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert read_holder(tmp_path) is None  # its label is still there, naming a dead pid
    with ProjectLock(tmp_path) as lock:
        assert lock.holder is not None and lock.holder.pid == os.getpid()
        assert read_holder(tmp_path) == lock.holder


def test_wait_blocks_until_the_holder_exits(tmp_path: Path, hold: Hold) -> None:
    proc = hold(HANG)
    told: list[str] = []
    released = time.monotonic()

    def release(described: str) -> None:  # once waiting, let the holder go
        nonlocal released
        told.append(described)
        released = time.monotonic()
        assert proc.stdin is not None
        proc.stdin.close()

    with ProjectLock(tmp_path, wait=True, on_wait=release):
        assert since(released) < NOT_HELD_UP  # noticed soon, not at the end of its HANG
        assert proc.wait(timeout=HANG) == 0
    assert len(told) == 1 and told[0].startswith(f"locked by pid {proc.pid} since ")


def test_wait_gives_up_after_the_timeout(tmp_path: Path, hold: Hold) -> None:
    proc = hold(30)
    start = time.monotonic()
    with pytest.raises(Locked) as e, ProjectLock(tmp_path, wait=True, timeout=0.3):
        pytest.fail("acquired a held lock")
    assert 0.3 <= since(start) < NOT_HELD_UP  # waited for its timeout, not for the holder
    assert str(e.value).startswith(f"locked by pid {proc.pid} since ")
    assert str(e.value).endswith(" (claw run nightly); gave up waiting after 0.3 s")


def test_two_locks_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    with ProjectLock(tmp_path, argv="first") as first:
        assert first.holder is not None
        with pytest.raises(Locked) as e, ProjectLock(tmp_path):
            pytest.fail("acquired a held lock")
        assert str(e.value) == (
            f"locked by pid {os.getpid()} since {minutes(first.holder.started)} (first); "
            "wait for it or use --wait"
        )
    assert read_holder(tmp_path) is None
    assert (tmp_path / ".claw/lock").read_bytes() == b""  # released: the label is gone
    with ProjectLock(tmp_path):
        pass


def test_one_winner_among_twenty_racers(tmp_path: Path, spawn: Spawn) -> None:
    racers = [spawn(RACE, str(tmp_path)) for _ in range(20)]
    for proc in racers:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    for proc in racers:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    answers = []
    for proc in racers:
        assert proc.stdout is not None
        answers.append(proc.stdout.readline())
    assert sorted(answers) == ["locked\n"] * 19 + ["ok\n"]


def test_a_child_process_does_not_inherit_the_lock(tmp_path: Path, spawn: Spawn) -> None:
    with ProjectLock(tmp_path):
        # close_fds=False hands over every inheritable descriptor; ours is close-on-exec.
        child = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        with ProjectLock(tmp_path):
            pass
    finally:
        child.kill()
        child.wait()


def test_an_unlabelled_holder_is_still_reported(tmp_path: Path) -> None:
    # The instant between a holder's flock() and its label, stretched.
    (tmp_path / ".claw").mkdir()
    with open(tmp_path / ".claw/lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        with pytest.raises(Locked) as e, ProjectLock(tmp_path):
            pytest.fail("acquired a held lock")
    assert str(e.value) == "locked by another claw run; wait for it or use --wait"


def test_read_holder_of_a_project_that_never_ran(tmp_path: Path) -> None:
    assert read_holder(tmp_path) is None


def test_claw_run_exits_75_while_another_run_holds_the_project(tmp_path: Path) -> None:
    from helpers import claw, make_project

    from claw_batch.run.lock import ProjectLock

    root = make_project(tmp_path / "p", "version: 1\ntasks:\n  t: {prompt: go}\n")
    with ProjectLock(root, argv="claw run t"):
        r = claw(root, "run", "--json")
    assert r.exit_code == 75
    assert r.stderr.startswith(f"claw: locked by pid {os.getpid()} since ")
    assert json.loads(r.stdout)["exit_code"] == 75
    assert not (root / ".claw/state.db").exists()


def test_claw_list_says_when_a_run_holds_the_project(tmp_path: Path) -> None:
    from helpers import claw, make_project

    root = make_project(tmp_path / "p", "version: 1\ntasks:\n  t: {prompt: go}\n")
    with ProjectLock(root, argv="claw run t"):
        r = claw(root, "list")
    assert r.exit_code == 0
    assert r.stderr.startswith(f"claw: a run is in progress, locked by pid {os.getpid()} since ")
    assert claw(root, "list").stderr == ""


# `claw run` itself, imported before the start line so that all of them reach the lock
# together when it says go (a Python start-up each would spread them over seconds).
CLAW_RUN = """
import sys
from claw_batch.cli import main
import claw_batch.commands.run, claw_batch.run.runner, claw_batch.run.session  # noqa: F401
sys.argv = ["claw", "run", "-C", sys.argv[1], "--json"]
print("ready", flush=True)
sys.stdin.readline()
main()
"""


@pytest.mark.slow
@pytest.mark.timeout(300)  # 50 Python processes on two cores
def test_fifty_claw_runs_at_once_one_runs_the_others_exit_75(tmp_path: Path) -> None:
    import threading

    from fake_openai import FakeOpenAI, Reply, text
    from helpers import make_project

    root = make_project(
        tmp_path / "p", "version: 1\nmodel: m\ntasks:\n  t: {prompt: go, output: a.md}\n"
    )
    arrived, release = threading.Event(), threading.Event()

    def held(body: dict[str, object]) -> Reply:  # the winner's job waits until all 49 are gone
        arrived.set()
        release.wait(120)
        return text("done")

    with FakeOpenAI() as srv:
        srv.handler = held
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url}
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", CLAW_RUN, str(root)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(50)
        ]
        try:
            for proc in runs:
                assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            for proc in runs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.close()
            assert arrived.wait(120)
            holder = read_holder(root)
            assert holder is not None
            [winner] = [p for p in runs if p.pid == holder.pid]
            losers = [p for p in runs if p is not winner]
            results = [(p.wait(timeout=120), _read(p.stdout), _read(p.stderr)) for p in losers]
            release.set()
            assert winner.wait(timeout=120) == 0
        finally:
            release.set()
            for proc in runs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                for stream in (proc.stdin, proc.stdout, proc.stderr):
                    if stream:
                        stream.close()
    told = (
        f"claw: locked by pid {winner.pid} since {minutes(holder.started)} "
        f"(claw run -C {root} --json); wait for it or use --wait\n"
    )
    assert [(code, err) for code, _, err in results] == [(75, told)] * 49
    assert all(json.loads(out)["exit_code"] == 75 for _, out, _ in results)
    assert len(srv.requests) == 1  # one run called the model, once
    assert (root / "a.md").read_text() == "done\n"


def _read(stream: IO[str] | None) -> str:
    assert stream is not None
    return stream.read()

"""The quick check of a large task on two cores (plan.halves): the forked child's share is
checked as closely as this process's own; a no-op's listing of its fan-out is the child's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, echo_prompt
from helpers import claw, claw_process, make_project

from claw_batch.plan import halves
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
    done = claw_process(root, "run", "--json", env=env)
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


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forks, even beside the test runner's threads: the child runs nothing but `holds`."""
    monkeypatch.setattr(halves, "pays", lambda n: n >= MIN_SPLIT)


def test_every_chunk_is_checked_once_by_one_process_or_the_other(
    tmp_path: Path, two_cores: None
) -> None:
    log = tmp_path / "spans"
    n = 10 * halves.CHUNK + 7

    def holds(start: int, end: int) -> bool:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, f"{os.getpid()} {start} {end}\n".encode())  # one write: atomic
        os.close(fd)
        return True

    assert all_in_halves(holds, n)
    spans = [line.split() for line in log.read_text().splitlines()]
    assert sorted((int(a), int(b)) for _, a, b in spans) == [
        (start, min(start + halves.CHUNK, n)) for start in range(0, n, halves.CHUNK)
    ]
    if (os.cpu_count() or 1) >= 2:
        assert len({pid for pid, _, _ in spans}) in (1, 2)  # the child may come too late


@pytest.mark.parametrize("answer", [True, False, "raises"])
def test_the_childs_own_check_counts(two_cores: None, answer: bool | str) -> None:
    def first() -> bool:
        if answer == "raises":
            raise OSError("a listing that failed")
        return bool(answer)

    assert all_in_halves(lambda start, end: True, MIN_SPLIT, first) is (answer is True)


@pytest.mark.parametrize("cut", [0.5, 1.0], ids=["mid-answer", "before-its-end"])
def test_a_child_killed_while_it_answers_counts_as_no(
    two_cores: None, monkeypatch: pytest.MonkeyPatch, cut: float
) -> None:
    """An answer larger than a pipe holds takes several writes; a child killed between them
    (the OOM killer, a `kill -9`) leaves a part of it, which must never pass for the whole."""
    parent, write = os.getpid(), os.write

    def dies_while_writing(fd: int, data: bytes) -> int:
        if os.getpid() == parent:
            return write(fd, data)
        write(fd, data[: int(len(data) * cut) - 1])
        os._exit(0)

    monkeypatch.setattr(os, "write", dies_while_writing)
    said = b"\x01\x00\x00\x00" * 30_000  # 120 KB: what 30,000 removed items make
    assert halves.shared(lambda start, end: True, MIN_SPLIT, lambda: said) is None


def test_a_whole_answer_is_handed_over(two_cores: None) -> None:
    said = bytes(range(256)) * 500
    assert halves.shared(lambda start, end: True, MIN_SPLIT, lambda: said) == said


LISTED_WHERE = """
import json, os, sys
from claw_batch.plan import halves, jobs
from claw_batch.cli import main
halves.usable_cores = lambda: 2
parent, glob_files, log = os.getpid(), jobs.glob_files, sys.argv[1]
def listed(root, pattern):
    with open(log, "a") as f:
        f.write("parent\\n" if os.getpid() == parent else "child\\n")
    return glob_files(root, pattern)
jobs.glob_files = listed
sys.argv = ["claw", "run", "--json"]
main()
"""


def listed_where(root: Path, env: dict[str, str], log: Path) -> tuple[list[str], dict[str, int]]:
    """Where `claw run --json` listed the fan-out (the forked child, or this process), and
    how many jobs of each status it reported."""
    log.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", LISTED_WHERE, str(log)],
        cwd=root,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    counts: dict[str, int] = {}
    for job in json.loads(done.stdout)["jobs"]:
        counts[job["status"]] = counts.get(job["status"], 0) + 1
    return log.read_text().splitlines(), counts


def test_a_no_op_lists_its_fan_out_in_the_forked_child(tmp_path: Path, server: FakeOpenAI) -> None:
    """The jobs come from the ledger; the child's listing must find the same items, else
    the run lists them itself and a new item runs, a removed one is gone."""
    items = {f"inbox/{n:04}.txt": f"item {n:04}\n" for n in range(MIN_SPLIT)}
    root = make_project(tmp_path / "p", CLAWFILE, items)
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
    assert claw(root, "run", "-q", "-j", "8", env=env).exit_code == 0
    log = tmp_path / "listed"
    assert listed_where(root, env, log) == (["child"], {"up-to-date": MIN_SPLIT})

    (root / "inbox/9999.txt").write_text("a new one\n")
    assert listed_where(root, env, log) == (["child", "parent"], {"up-to-date": MIN_SPLIT, "ok": 1})
    assert listed_where(root, env, log) == (["child"], {"up-to-date": MIN_SPLIT + 1})

    (root / "inbox/0000.txt").unlink()  # its ledger row stays: a job no more, not a change
    assert listed_where(root, env, log) == (["child"], {"up-to-date": MIN_SPLIT})
    (root / "inbox/0001.txt").write_text("changed\n")  # found first: the child may be cut short
    where, counts = listed_where(root, env, log)
    assert (where[-1:], counts) == (["parent"], {"up-to-date": MIN_SPLIT - 1, "ok": 1})
    (root / "inbox/0002.txt").unlink()
    (root / "inbox/0000.txt").write_text("item 0000\n")  # back, as it was: its seal is old
    where, counts = listed_where(root, env, log)
    assert (where[-1:], counts) == (["parent"], {"up-to-date": MIN_SPLIT})


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

"""Model calls in worker processes (llm.workers, llm.workerproc), through real `claw run`
processes against the fake server: who made each call is read from /proc (the process that
owns the client end of each connection to the server), never from claw's own word."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, error, raw, text, tool_calls
from helpers import HANG, NOT_HELD_UP, make_project, since

from claw_batch.cores import usable_cores
from claw_batch.llm.workers import AUTO_CORES, AUTO_FROM

KEY = "sk-workers-0123456789abcdef"
Handler = Callable[[dict[str, Any]], Reply]


# --- who owns the connections: /proc ----------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """`pid`'s children (Linux: /proc/PID/task/*/children)."""
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def connection_owners(port: int, pids: list[int]) -> set[int]:
    """Which of `pids` hold an established connection to 127.0.0.1:`port`."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port and fields[3] == "01":
                inodes.add(f"socket:[{fields[9]}]")
    owners = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    owners.add(pid)
                    break
            except OSError:
                continue
    return owners


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Watched:
    """A handler that notes, at every request, the processes of the run that hold a
    connection to the server: claw itself (`pid`) or its workers."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.pid = 0
        self.port = 0
        self.owners: list[set[int]] = []  # at each request
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        owners = connection_owners(self.port, [self.pid, *descendants(self.pid)])
        with self.lock:
            self.owners.append(owners)
        return self.handler(body)

    @property
    def workers(self) -> set[int]:
        return {p for seen in self.owners for p in seen} - {self.pid}


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def start(
    root: Path, srv: FakeOpenAI, watched: Watched, *args: str, **env: str
) -> subprocess.Popen[str]:
    srv.handler = watched
    watched.port = int(srv.base_url.rsplit(":", 1)[1].split("/")[0])
    environ = {
        **os.environ,
        "OPENAI_BASE_URL": srv.base_url,
        "OPENAI_API_KEY": KEY,
        "CLAW_NOW": "2026-11-22T23:05:00+01:00",
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "run", "--json", *args],
        cwd=root,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives it
    )
    watched.pid = proc.pid
    return proc


def fanout(root: Path, n: int, extra: str = "", timeout: float = 120) -> Path:
    return make_project(
        root,
        f"""
        version: 1
        model: fake-model
        tasks:
          t:
            foreach: "inbox/*.txt"
            prompt: "Handle {{{{ item.path }}}}"
            output: "out/{{{{ item.stem }}}}.md"
            tools: [ls]
            max_steps: 100
            timeout: {timeout}
        {textwrap.indent(extra, " " * 8)}
        """,
        {f"inbox/{i:03}.txt": f"item {i}\n" for i in range(n)},
    )


def wait_for(condition: Callable[[], bool], what: str) -> None:
    started = time.monotonic()
    while not condition():
        assert since(started) < NOT_HELD_UP, f"never: {what}"
        time.sleep(0.02)


# --- when ---------------------------------------------------------------------------------------


@pytest.mark.skipif(
    usable_cores() < AUTO_CORES, reason=f"workers start by themselves with {AUTO_CORES} cores"
)
def test_a_run_with_enough_calls_in_flight_moves_them_to_workers(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """The first calls are made by claw itself; once AUTO_FROM are in flight at once, past
    AUTO_AFTER seconds from the first, workers start and take the calls. Each job keeps calling
    `ls` (its calls in flight most of the time) until a worker's connection shows."""
    first_wave = threading.Barrier(AUTO_FROM, timeout=HANG)

    def model(body: dict[str, Any]) -> Reply:
        turns = sum(m["role"] == "assistant" for m in body["messages"])
        if turns == 0:
            first_wave.wait()  # every job's first call in flight at once
        if turns < 2 or (not watched.workers and turns < 90):
            time.sleep(0.3)
            return tool_calls(call("ls", {"path": "." if turns % 2 else "inbox"}))  # no loop
        return text("done")

    watched = Watched(model)
    proc = start(fanout(tmp_path / "p", AUTO_FROM), server, watched, "-j", str(AUTO_FROM), "-v")
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, err
    assert [j["status"] for j in json.loads(out)["jobs"]] == ["ok"] * AUTO_FROM
    assert watched.owners[0] == {watched.pid}  # the first request: claw's own
    assert len(watched.workers) == 1  # -j 64: one worker process
    assert "claw: model calls in 1 worker process" in err.splitlines()


def test_a_run_with_few_calls_in_flight_makes_them_itself(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    watched = Watched(lambda body: text("done"))
    proc = start(fanout(tmp_path / "p", 8), server, watched, "-j", str(AUTO_FROM))
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, err
    assert len(watched.owners) == 8
    assert watched.workers == set()
    assert all(seen <= {watched.pid} for seen in watched.owners)


def test_claw_workers_sets_the_number_or_refuses_a_bad_one(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    watched = Watched(lambda body: text("done"))
    proc = start(fanout(tmp_path / "p", 1), server, watched, CLAW_WORKERS="two")
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 2
    assert err.splitlines()[-1] == (
        "claw: CLAW_WORKERS='two' is not a number of worker processes (e.g. 2, or 0)"
    )


# --- the same results ---------------------------------------------------------------------------

STREAMED = """
  s:
    model: local/fake-model
    foreach: "inbox/*.txt"
    prompt: "Stream {{ item.path }}"
    output: "streamed/{{ item.stem }}.md"
    tools: [ls]
providers:
  local: {base_url: BASE_URL, stream: true}
"""


def varied(body: dict[str, Any]) -> Reply:
    """Per item: tool calls then an answer with usage and thinking, a refusal, a malformed
    reply, an unknown model."""
    prompt = body["messages"][1]["content"]
    item = int(prompt.rsplit("/", 1)[1].split(".")[0])
    turns = sum(m["role"] == "assistant" for m in body["messages"])
    if item % 4 == 1:
        return error(400, f"tools unsupported for {item}")
    if item % 4 == 2:
        return raw(b"<html>gateway</html>")
    if turns == 0:
        return tool_calls(call("ls", {"path": "inbox"}), reasoning="look first")
    return text(f"answer {item}: {turns} turns", usage=(100 + item, 7), cached=3)


def run_twice(tmp_path: Path, srv: FakeOpenAI, workers: str) -> tuple[dict[str, Any], Watched]:
    root = fanout(tmp_path / workers, 8, STREAMED.replace("BASE_URL", srv.base_url))
    watched = Watched(varied)
    proc = start(root, srv, watched, "-j", "4", "-k", CLAW_WORKERS=workers)
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 1, err
    summary = json.loads(out)
    for job in summary["jobs"]:
        job.pop("duration_s")
        job.pop("transcript")
        if job["output"]:
            job["content"] = (root / job["output"]).read_text()
    summary["jobs"].sort(key=lambda j: (j["task"], j["item"]))  # in the order they ended
    summary.pop("run_id")
    summary["totals"].pop("duration_s")
    return summary, watched


def test_calls_in_workers_give_what_calls_in_claw_give(tmp_path: Path, server: FakeOpenAI) -> None:
    here, _ = run_twice(tmp_path, server, "0")
    there, watched = run_twice(tmp_path, server, "2")
    assert there == here
    assert len(watched.workers) == 2
    assert all(watched.pid not in seen for seen in watched.owners)  # none made by claw
    errors = {j["error"] for j in there["jobs"] if j["error"]}
    assert f"model 'fake-model' at {server.base_url}: HTTP 400: tools unsupported for 1; " in (
        "".join(errors)
    )


# --- limits across workers ----------------------------------------------------------------------


def test_a_refused_key_fails_every_later_call_whichever_worker_makes_it(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """-j 1 over two workers, whose calls alternate: the first answers, the second is
    refused, and the first worker sends nothing more although it was not the one told."""
    refusal = error(401, f"Incorrect API key provided: {KEY}.", code="invalid_api_key")
    watched = Watched(lambda body: text("done") if len(server.requests) == 1 else refusal)
    proc = start(fanout(tmp_path / "p", 5), server, watched, "-k", CLAW_WORKERS="2")
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 1, err
    message = (
        f"model 'fake-model' at {server.base_url}: HTTP 401: Incorrect API key provided: "
        "[REDACTED].; check the API key in $OPENAI_API_KEY / the provider's api_key_env"
    )
    jobs = [(j["status"], j["error"]) for j in json.loads(out)["jobs"]]
    assert jobs == [("ok", None)] + [("failed", message)] * 4
    assert len(server.requests) == 2
    assert len(watched.workers) == 2


class Storm:
    """429 with retry-after-ms for `seconds` after the first request, then answers; counts
    the requests that came during the storm."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started: float | None = None
        self.during = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.started = self.started or time.monotonic()
            if time.monotonic() - self.started < self.seconds:
                self.during += 1
                body = {"error": {"message": "Rate limit reached", "type": "requests"}}
                return Reply(status=429, body=body, headers={"retry-after-ms": "500"})
        return text("done")


@pytest.mark.slow
def test_a_429_storm_is_waited_out_together_across_workers(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    storm = Storm(3.0)
    watched = Watched(storm)
    proc = start(fanout(tmp_path / "p", 8), server, watched, "-j", "8", CLAW_WORKERS="2")
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, err
    assert [j["status"] for j in json.loads(out)["jobs"]] == ["ok"] * 8
    assert len(watched.workers) == 2
    # Those in flight when it began, then one probe per wait (0.5 s): not each worker alone.
    assert storm.during <= 8 + 3.0 / 0.5 + 2


# --- the end of a run, and of a worker ----------------------------------------------------------


def hung_run(
    tmp_path: Path, srv: FakeOpenAI, timeout: float = 120
) -> tuple[subprocess.Popen[str], list[int]]:
    """A run whose two workers each make a call that hangs; and their pids."""
    watched = Watched(
        lambda body: Reply(message={"role": "assistant", "content": "late"}, stall=HANG)
    )
    root = fanout(tmp_path / "p", 2, timeout=timeout)
    proc = start(root, srv, watched, "-j", "2", CLAW_WORKERS="2")
    wait_for(lambda: len(srv.requests) == 2, "two calls in flight")
    workers = descendants(proc.pid)
    assert len(workers) == 2 and all(alive(p) for p in workers)
    return proc, workers


def test_a_killed_run_leaves_no_worker(tmp_path: Path, server: FakeOpenAI) -> None:
    proc, workers = hung_run(tmp_path, server)
    proc.kill()
    proc.communicate(timeout=HANG)
    wait_for(lambda: not any(alive(p) for p in workers), "the workers exited")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_exits_130_with_its_workers_gone(
    tmp_path: Path, server: FakeOpenAI, signum: int
) -> None:
    proc, workers = hung_run(tmp_path, server)
    started = time.monotonic()
    os.killpg(proc.pid, signum)  # as the terminal does: to the whole process group
    _, err = proc.communicate(timeout=HANG)
    assert since(started) < NOT_HELD_UP
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "claw: interrupted"
    assert not any(alive(p) for p in workers)


def test_a_worker_that_dies_mid_call_fails_that_call_and_says_so(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """The other worker's call hangs until its job's timeout (5 s)."""
    proc, workers = hung_run(tmp_path, server, timeout=5)
    os.kill(workers[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=HANG)
    jobs = json.loads(out)["jobs"]
    assert sorted(j["status"] for j in jobs) == ["failed", "limit"]
    said = [j["error"] for j in jobs if j["status"] == "failed"]
    assert said == [
        f"model 'fake-model' at {server.base_url}: the worker process {workers[0]} making the "
        "call was killed by signal 9; the call was not retried (the endpoint may have "
        "answered it)"
    ], err

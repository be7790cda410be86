"""Parallel efficiency: 200 jobs × 3 model turns against a model that takes 100 ms a turn.

A fan-out of --items files; tests/fake_openai.FakeOpenAI (in this process, keep-alive, with
`latency = 0.1`) has each job `read` its item, then `ls` the project root, then answer. `claw run
-q -j J` runs as a real child process, --repeat times for each J (the run with the median model
phase is shown).

The ideal time at `-j J` is the zero-overhead makespan: ceil(items / J) waves of jobs, each
turns × latency long (200 jobs on 32 slots: 7 × 0.3 s = 2.1 s). items × turns × latency / J
("work / J") is printed too, for reference: no scheduler reaches it with equal jobs when J does
not divide items.

What is judged (issue 3, 7b: ≥ 0.9 at -j 32) is the model phase against the ideal: from the first
request reaching the server to the last reply leaving it. Start-up (the interpreter, the
clawfile, importing the openai SDK: a constant, not parallel work) is printed next to it with the
whole run's efficiency (ideal / the child's wall time), so that both can be read. The mean
number of requests in flight at the server over the phase says how well claw keeps J requests
going; claw's CPU time (user + system; over the whole run, and from the first request on) says
whether it could: all of its Python runs under one GIL.

Then the same work at zero latency, at -j 1 and at -j J: what claw costs per turn with the
model taken out, and a cProfile of the -j 1 run (every thread).

The script exits 0 whether or not the target is met; non-zero only when a run fails.

    python bench/parallel.py [--items 200] [--latency 0.1] [-j 32] [--others 8,64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import machine, ms, table, use_repo

use_repo()

from fake_openai import Reply, call, text, tool_calls  # noqa: E402
from fullrun import (  # noqa: E402
    CLAW,
    Finished,
    TimedHandler,
    callee_tree,
    fake_env,
    fan_out_project,
    load,
    phase_table,
    profile_claw,
    revision,
    timed_fake,
)

TURNS = 3
API_KEY = "sk-bench-0123456789abcdef"
TASK = """\
    tools: [read, ls]
"""
CLIENT_CALLS = 300
TARGET = 0.9  # ideal / model phase at -j 32: issue 3, 7b
OPENAI_COMPAT = "claw_batch/llm/openai_compat.py"
INTERRUPTIBLE = "claw_batch/llm/interruptible.py"
ITEM = re.compile(r"inbox/\d+\.txt")

PHASES = (
    ("imports (inside the run)", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("check a job: prepare, fingerprint, decide", "claw_batch/run/session.py", "check"),
    ("run a job", "claw_batch/run/job.py", "run_job"),
    ("  OpenAI client (imports openai), once", "claw_batch/llm/endpoints.py", "_make"),
    ("  the tool loop", "claw_batch/agent/loop.py", "run"),
    ("    tool specs for the loop", "claw_batch/tools/registry.py", "spec"),
    ("    model call, waited for by the job", "claw_batch/llm/openai_compat.py", "complete"),
    ("      SDK post + HTTP", "claw_batch/llm/openai_compat.py", "_call"),
    ("        connect, on a call thread (once a connection)", INTERRUPTIBLE, "_on_a_call_thread"),
    ("        socket reads", INTERRUPTIBLE, "read"),
    ("        request body (claw's wire dicts)", "claw_batch/llm/wire.py", "request_body"),
    ("        SDK: build the request", "openai/_base_client.py", "_build_request"),
    ("        httpx: send, read the reply", "httpx2/_client.py", "send"),
    ("        reply to a Completion", "claw_batch/llm/wire.py", "completion_from_reply"),
    ("    a tool call (read, ls)", "claw_batch/tools/registry.py", "invoke"),
    ("    events: transcript, ledger, progress", "claw_batch/run/jobsink.py", "__call__"),
    ("    transcript writes, once a turn", "claw_batch/store/transcript.py", "flush"),
    ("  write the output (fsync, rename)", "claw_batch/safety/safeopen.py", "write_file"),
    ("  ledger: every transaction", "claw_batch/store/database.py", "transaction"),
    ("  ledger: job ends, by group commit", "claw_batch/store/state.py", "_write_ends"),
)


class Child:
    """The claw process being measured, and its CPU time when the first request arrived."""

    pid = 0
    cpu_at_first_request: float | None = None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a running process, from /proc (Linux); None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def model(body: dict[str, Any]) -> Reply:
    """Turn 1: read the item; turn 2: ls; turn 3: the answer."""
    if Child.cpu_at_first_request is None and Child.pid:
        Child.cpu_at_first_request = cpu_seconds(Child.pid)
    messages = body["messages"]
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn == 0:
        item = ITEM.search(messages[-1]["content"])
        return tool_calls(call("read", {"path": item[0] if item else "missing"}))
    if turn == 1:
        return tool_calls(call("ls", {"path": "."}))
    return text("triaged: the printer is on fire")


def run_child(
    root: Path, args: Sequence[str], env: Mapping[str, str]
) -> tuple[Finished, float | None]:
    """fullrun.run_claw, keeping the child's pid in `Child` so that `model` can read its CPU
    time at the first request; returns the run and that CPU time."""
    Child.cpu_at_first_request = None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [CLAW, *args], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    Child.pid = proc.pid
    _, err = proc.communicate()
    wall = time.perf_counter() - started
    Child.pid = 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    stderr = err.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        sys.exit(f"claw {' '.join(args)} failed ({proc.returncode}):\n{stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Finished(wall, cpu, started, stderr), Child.cpu_at_first_request


@dataclass(frozen=True)
class Run:
    jobs: int
    run: Finished
    before: float  # from starting the child to the first request
    phase: float  # from the first request's arrival to the last reply
    in_flight: float  # mean requests at the server during the phase
    phase_cpu: float | None  # claw's CPU seconds from the first request on
    server_cpu: float  # seconds of CPU this process (the fake server) used meanwhile


def run_at(items: int, jobs: int, latency: float) -> Run:
    with tempfile.TemporaryDirectory() as tmp, timed_fake(model, latency) as srv:
        root = fan_out_project(Path(tmp) / "p", items, TASK)
        cpu = time.process_time()
        finished, cpu_at_first = run_child(root, ["run", "-q", "-j", str(jobs)], fake_env(srv))
        server_cpu = time.process_time() - cpu
        visits = TimedHandler.visits
        if len(visits) != items * TURNS:
            sys.exit(f"expected {items * TURNS} requests, got {len(visits)}")
        first = min(v.arrived for v in visits)
        phase = max(v.served for v in visits) - first
        busy = sum(v.served - v.arrived for v in visits)
        phase_cpu = None if cpu_at_first is None else finished.cpu - cpu_at_first
        return Run(
            jobs, finished, first - finished.started, phase, busy / phase, phase_cpu, server_cpu
        )


def median_run(runs: Sequence[Run]) -> Run:
    return sorted(runs, key=lambda r: r.phase)[len(runs) // 2]


def ideal(items: int, jobs: int, latency: float) -> float:
    """The zero-overhead makespan: ceil(items / jobs) waves of TURNS turns."""
    return math.ceil(items / jobs) * TURNS * latency


def efficiency_table(runs: Sequence[Run], items: int, latency: float) -> str:
    turns = items * TURNS
    rows = []
    for r in runs:
        best = ideal(items, r.jobs, latency)
        phase_cpu = "n/a" if r.phase_cpu is None else f"{r.phase_cpu:.2f}"
        per_turn = "n/a" if r.phase_cpu is None else ms(r.phase_cpu / turns, 2)
        rows.append(
            (
                r.jobs,
                f"{best:.2f}",
                f"{items * TURNS * latency / r.jobs:.2f}",
                f"{r.phase:.2f}",
                f"**{best / r.phase:.2f}**",
                f"{r.before:.2f}",
                f"{r.run.wall:.2f}",
                f"{best / r.run.wall:.2f}",
                f"{r.in_flight:.1f}",
                f"{r.run.cpu:.2f}",
                phase_cpu,
                per_turn,
                f"{r.server_cpu:.2f}",
            )
        )
    header = (
        "-j",
        "ideal s",
        "work / J s",
        "model phase s",
        "ideal / phase",
        "start-up s",
        "whole run s",
        "ideal / whole run",
        "requests in flight",
        "claw CPU s, whole run",
        "claw CPU s, model phase",
        "claw CPU ms/turn, model phase",
        "fake server CPU s",
    )
    return table(header, rows)


def verdict(r: Run, items: int, latency: float) -> str:
    best = ideal(items, r.jobs, latency)
    met = "met" if best / r.phase >= TARGET else "missed"
    return (
        f"target at -j {r.jobs}: ideal / model phase ≥ {TARGET}: **{met}**, "
        f"{best:.2f} / {r.phase:.2f} s = {best / r.phase:.2f}. The whole run, start-up "
        f"included: {best:.2f} / {r.run.wall:.2f} s = {best / r.run.wall:.2f} "
        f"({r.before:.2f} s before the first request)."
    )


def zero_latency_table(runs: Sequence[Run], items: int) -> str:
    turns = items * TURNS
    rows = [
        (
            r.jobs,
            f"{r.run.wall:.2f}",
            f"{r.before:.2f}",
            f"{r.phase:.2f}",
            ms(r.phase / turns, 2),
            f"{r.run.cpu:.2f}",
            ms(r.run.cpu / turns, 2),
            "n/a" if r.phase_cpu is None else ms(r.phase_cpu / turns, 2),
            f"{r.server_cpu:.2f}",
        )
        for r in runs
    ]
    header = (
        "-j",
        "wall s",
        "start-up s",
        "model phase s",
        "phase ms/turn",
        "CPU s",
        "CPU ms/turn, whole run",
        "CPU ms/turn, model phase",
        "fake server CPU s",
    )
    return table(header, rows)


# -- one model call, piece by piece -----------------------------------------------------------


def one_request() -> Any:
    """A first-turn ChatRequest as the tool loop sends it (system, user, two tools)."""
    from claw_batch.llm.messages import ChatRequest, Message
    from claw_batch.tools.registry import TOOLS

    system = Message("system", "You are claw, a headless agent. " * 50)
    messages = (system, Message("user", "Triage inbox/00001.txt"))
    tools = (TOOLS["read"].spec(), TOOLS["ls"].spec())
    return ChatRequest(model="fake-model", messages=messages, tools=tools)


def clients(base_url: str) -> dict[str, Callable[[], object]]:
    """One model call each way, all to the same server, all keeping their connection."""
    import http.client
    import json
    import urllib.parse

    import httpx2 as httpx  # what this openai release uses (a fork of httpx)
    import openai

    from claw_batch.llm import wire
    from claw_batch.llm.openai_compat import OpenAICompatLLM

    llm = OpenAICompatLLM(base_url=base_url, api_key=API_KEY)
    request = one_request()
    body = wire.request_body(request)
    sdk = openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
    plain = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {API_KEY}"})
    url = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port)
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}

    def stdlib() -> object:
        connection.request("POST", f"{url.path}/chat/completions", json.dumps(body), headers)
        return wire.completion_from_reply(json.loads(connection.getresponse().read()))

    from claw_batch.llm.transport import Pool  # what the adapter calls, without the adapter

    pool = Pool(f"{base_url}/chat/completions", headers)

    def transport() -> object:
        encoded = wire.request_json(request)
        with pool.post(encoded, read_timeout=60, connect_timeout=10) as reply:
            return wire.completion_from_reply(json.loads(reply.read()))

    return {
        "claw's adapter: `OpenAICompatLLM.complete`": lambda: llm.complete(
            request, deadline=time.monotonic() + 60
        ),
        "the same without its deadline: `OpenAICompatLLM._call`": lambda: llm._call(
            request, 60, time.monotonic() + 60
        ),
        "openai SDK `client.post` (body built, JSON reply)": lambda: sdk.post(
            "/chat/completions", cast_to=object, body=body
        ),
        "httpx `Client.post` + `json.loads`": lambda: plain.post(
            "/chat/completions", json=body
        ).json(),
        "stdlib `http.client`, keep-alive, + `json`": stdlib,
        "claw's HTTP client `transport.Pool.post` + `json`": transport,
    }


def client_table(calls: int) -> str:
    """Sequential calls at zero latency; the client's share is the wall time per call minus
    the time the server spent on it."""
    rows = []
    with timed_fake(lambda body: text("ok")) as srv:
        for name, fn in clients(srv.base_url).items():
            for _ in range(20):  # warm up: connection, caches
                fn()
            TimedHandler.visits = []
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            wall = (time.perf_counter() - started) / calls
            server = sum(v.served - v.arrived for v in TimedHandler.visits) / calls
            rows.append((name, ms(wall, 2), ms(server, 2), ms(wall - server, 2)))
    return table(("one call", "ms per call", "of which server", "client side ms"), rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("-j", "--jobs", type=int, default=32)
    parser.add_argument("--others", default="8,64", help="more -j values, for context")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    items, latency = args.items, args.latency
    began = time.perf_counter()
    print(f"machine: {machine()}; claw_batch at {revision()}; {load()}\n")

    levels = [args.jobs, *(int(j) for j in args.others.split(",") if j)]
    runs = [median_run([run_at(items, j, latency) for _ in range(args.repeat)]) for j in levels]
    print(
        f"{items} jobs × {TURNS} turns, {latency * 1000:.0f} ms a turn; the run with the median "
        f"model phase of {args.repeat} for each -j; ideal = ceil({items} / j) × {TURNS} × "
        f"{latency} s; work / J = {items} × {TURNS} × {latency} s / j\n"
    )
    print(efficiency_table(runs, items, latency), end="\n\n")
    print(verdict(runs[0], items, latency), end="\n\n")

    zero = [run_at(items, 1, 0.0), run_at(items, args.jobs, 0.0)]
    print("the same work at zero latency (claw's own cost):\n")
    print(zero_latency_table(zero, items), end="\n\n")

    with tempfile.TemporaryDirectory() as tmp, timed_fake(model) as srv:
        root = fan_out_project(Path(tmp) / "p", items, TASK)
        profiled = profile_claw(root, ["run", "-C", str(root), "-q", "-j", "1"], fake_env(srv))
    turns = items * TURNS
    print(
        f"cProfile of `claw run -j 1` at zero latency ({profiled.threads} threads profiled): "
        f"{profiled.wall:.1f} s in main() under the profiler; per turn:\n"
    )
    print(phase_table(profiled.stats, PHASES, turns, profiled.wall, per="turn"), end="\n\n")
    print("one model call (`OpenAICompatLLM._call`), by callee (per turn):\n")
    tree = callee_tree(profiled.stats, OPENAI_COMPAT, "_call", turns, per="turn")
    print(f"```\n{tree}\n```\n")
    print(f"one model call, {CLIENT_CALLS} in a row to the fake server (in this process):\n")
    print(client_table(CLIENT_CALLS), end="\n\n")
    print(f"the script took {time.perf_counter() - began:.0f} s; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

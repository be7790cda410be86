"""Per-turn overhead of the tool loop, the model excluded.

A job of 100 turns, each a `read` of a different 2 KB file, then a final answer: the
conversation, which every request re-sends whole, grows to about 200 KB. Three measurements:

1. `claw run` in-process (click's CliRunner, through tests/helpers.claw) against FakeOpenAI
   with zero latency: the real path — runner, transcript, ledger, OpenAI SDK, HTTP. A turn is
   the time between two requests arriving at the server.
2. The same turns minus the time the fake server spends on each request (reading the body,
   parsing it, answering): claw's side of the wire, SDK and HTTP client included.
3. The loop only: `ToolLoop` with tests/scripted.py's ScriptedLLM (no HTTP, no JSON), its
   events written to a real transcript and ledger as the runner does. Also the time spent in
   those event writes, which must not grow with the transcript.

Then what encoding one request costs as the conversation grows, on the requests of run 3:
claw's conversion to wire dicts, `json.dumps` of the body (inherent to a chat API, which is
re-sent whole every turn) and the openai SDK's own walk over the parameters (`maybe_transform`,
which `chat.completions.create` runs before it encodes anything).

    python bench/loop_overhead.py [--turns 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from _common import machine, ms, scratch, table, use_repo

use_repo()

from fake_openai import FakeOpenAI, _Handler, call, text, tool_calls  # noqa: E402
from helpers import claw, make_project  # noqa: E402
from scripted import ScriptedLLM, calls, say  # noqa: E402

from claw_batch.agent.loop import LoopSettings, ToolLoop  # noqa: E402
from claw_batch.llm.messages import ChatRequest, Completion, Message  # noqa: E402
from claw_batch.safety.paths import Policy  # noqa: E402
from claw_batch.safety.redact import Redactor  # noqa: E402
from claw_batch.store.state import State  # noqa: E402
from claw_batch.store.transcript import Transcript  # noqa: E402
from claw_batch.tools.base import ToolContext  # noqa: E402
from claw_batch.tools.registry import TOOLS  # noqa: E402

FILE_LINES = 40
LINE = "lorem ipsum dolor sit amet, consectetur adipisci {n:04d}"  # ~50 bytes a line
CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      bench:
        prompt: "Read every file in data/, one per turn, then say done."
        tools: [read]
        max_steps: {steps}
        timeout: 600
        output: out.md
"""
WINDOWS = ((1, 10), (45, 55), (90, 100))  # turns, inclusive; scaled when --turns is not 100
FLAT = 1.25  # turns 90–100 ÷ turns 1–10 of claw's side: what "flat" is taken to mean
LOOP_REPEAT = 5  # the loop alone takes a fraction of a second: repeat it more for steadier numbers


def data_file(n: int) -> str:
    return "\n".join(LINE.format(n=n * FILE_LINES + i) for i in range(FILE_LINES)) + "\n"


def project(root: Path, turns: int) -> Path:
    files = {f"data/f{n:03d}.txt": data_file(n) for n in range(turns)}
    return make_project(root, CLAWFILE.format(steps=turns + 5), files)


# -- 1 and 2: claw run against the fake server -------------------------------------------


@dataclass(frozen=True)
class Visit:
    arrived: float  # perf_counter when the server began handling the request
    served: float  # ... and when it had sent the reply
    body_bytes: int


class _TimedHandler(_Handler):
    visits: ClassVar[list[Visit]] = []  # one list per process is enough for a benchmark

    def do_POST(self) -> None:
        arrived = time.perf_counter()
        super().do_POST()
        size = int(self.headers.get("Content-Length") or 0)
        _TimedHandler.visits.append(Visit(arrived, time.perf_counter(), size))


def run_over_http(turns: int) -> tuple[list[Visit], float, float]:
    """One `claw run`: the server's visits, and when the run started and ended."""
    with scratch() as tmp, FakeOpenAI() as srv:
        root = project(Path(tmp) / "p", turns)
        srv._server.RequestHandlerClass = _TimedHandler  # socketserver's documented attribute
        _TimedHandler.visits = []
        srv.enqueue(
            *[tool_calls(call("read", {"path": f"data/f{n:03d}.txt"})) for n in range(turns)]
        )
        srv.enqueue(text("done"))
        env = {
            "OPENAI_BASE_URL": srv.base_url,
            "OPENAI_API_KEY": "sk-bench-0123456789abcdef",
            "NO_PROXY": "127.0.0.1",
        }
        started = time.perf_counter()
        result = claw(root, "run", "-q", env=env)
        ended = time.perf_counter()
        if result.exit_code != 0:
            sys.exit(f"claw run failed ({result.exit_code}): {result.stderr}")
        return list(_TimedHandler.visits), started, ended


# -- 3: the loop alone ---------------------------------------------------------------------


@dataclass
class LoopTrace:
    asked: list[float]  # perf_counter at each model call
    event_seconds: list[float]  # per turn: time in transcript and ledger writes
    transcript_bytes: int = 0
    requests: list[ChatRequest] = field(default_factory=list)


def run_loop_only(turns: int) -> LoopTrace:
    with scratch() as tmp:
        root = project(Path(tmp) / "p", turns)
        trace = LoopTrace([], [0.0] * (turns + 2))

        def answer(reply: Completion) -> Callable[[ChatRequest], Completion]:
            def timed(request: ChatRequest) -> Completion:
                trace.asked.append(time.perf_counter())
                return reply

            return timed

        replies = [answer(calls(("read", {"path": f"data/f{n:03d}.txt"}))) for n in range(turns)]
        llm = ScriptedLLM(*replies, answer(say("done")))
        transcript = Transcript(root / ".claw/runs/bench/bench.jsonl", Redactor(["sk-bench-0123"]))
        state = State(root / ".claw/state.db")
        step = 0

        def on_event(kind: str, **fields: Any) -> None:  # what Runner._run_one's on_event does
            nonlocal step
            started = time.perf_counter()
            transcript.event(kind, **fields)
            if kind == "assistant":
                step = fields["step"]
                state.record_call("bench", "bench", "", step, "m", fields["usage"], 0.0)
            trace.event_seconds[step] += time.perf_counter() - started

        deadline = time.monotonic() + 600
        ctx = ToolContext(root=root, policy=Policy(root), env={}, deadline=deadline)
        settings = LoopSettings(
            model="m", temperature=None, max_steps=turns + 5, deadline=deadline, timeout=600
        )
        loop = ToolLoop(llm, {"read": TOOLS["read"]}, ctx, settings, on_event=on_event)
        loop.run([Message("system", "You are a benchmark."), Message("user", "Read data/.")])
        transcript.close()
        state.close()
        trace.transcript_bytes = transcript.path.stat().st_size
        trace.requests = llm.requests
        return trace


# -- encoding one request ------------------------------------------------------------------


def best_of(fn: Callable[[], object], times: int = 7) -> float:
    fn()
    return statistics.median(_timed(fn) for _ in range(times))


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def encoding_table(requests: Sequence[ChatRequest], turns: int) -> str:
    from claw_batch.llm.wire import wire_message, wire_tool

    try:  # private to the SDK, hence optional: what `create` does to its arguments first
        from openai._utils import maybe_transform
        from openai.types.chat.completion_create_params import (
            CompletionCreateParamsNonStreaming as Params,
        )
    except ImportError:
        maybe_transform = None
    rows = []
    for turn in (1, turns // 2, turns + 1):
        request = requests[turn - 1]
        wire = [wire_message(m) for m in request.messages]
        body = {
            "model": request.model,
            "messages": wire,
            "tools": list(map(wire_tool, request.tools)),
        }
        sdk = "n/a"
        if maybe_transform is not None:
            sdk = ms(best_of(lambda body=body: maybe_transform(body, Params)), 2)
        rows.append(
            (
                turn,
                len(request.messages),
                f"{len(json.dumps(body)) / 1024:.0f}",
                ms(best_of(lambda request=request: [wire_message(m) for m in request.messages]), 2),
                ms(best_of(lambda body=body: json.dumps(body)), 2),
                sdk,
            )
        )
    header = ("request (turn)", "messages", "body KB", "claw: to wire dicts ms")
    header += ("json.dumps ms", "openai SDK maybe_transform ms")
    return table(header, rows)


# -- reporting -----------------------------------------------------------------------------


def per_turn(runs: Sequence[Sequence[float]]) -> list[float]:
    """Turn by turn, the median over the repeats."""
    return [statistics.median(values) for values in zip(*runs, strict=True)]


def windows(turns: int) -> list[tuple[int, int]]:
    scale = turns / 100
    return [(max(1, round(a * scale)), max(1, round(b * scale))) for a, b in WINDOWS]


def window_mean(values: Sequence[float], first: int, last: int) -> float:
    return statistics.fmean(values[first - 1 : last])


def row(name: str, values: Sequence[float], turns: int) -> list[str]:
    means = [window_mean(values, a, b) for a, b in windows(turns)]
    return [name, ms(statistics.fmean(values)), *map(ms, means), f"{means[-1] / means[0]:.2f}"]


@dataclass
class HttpRuns:
    turns: list[list[float]] = field(default_factory=list)  # per run, per turn: seconds
    server: list[list[float]] = field(default_factory=list)
    client: list[list[float]] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    before: list[float] = field(default_factory=list)  # from the start to the first request
    after: list[float] = field(default_factory=list)  # from the last reply to the end
    bodies: list[int] = field(default_factory=list)  # request sizes of the last run


def measure_http(turns: int, repeat: int) -> HttpRuns:
    run_over_http(10)  # warm-up: imports (openai among them), pydantic schemas, the SDK client
    runs = HttpRuns()
    for _ in range(repeat):
        visits, started, ended = run_over_http(turns)
        gaps = [b.arrived - a.arrived for a, b in itertools.pairwise(visits)]
        server = [v.served - v.arrived for v in visits[:-1]]
        runs.turns.append(gaps)
        runs.server.append(server)
        runs.client.append([gap - s for gap, s in zip(gaps, server, strict=True)])
        runs.walls.append(ended - started)
        runs.before.append(visits[0].arrived - started)
        runs.after.append(ended - visits[-1].served)
        runs.bodies = [v.body_bytes for v in visits]
    return runs


def turn_table(http: HttpRuns, loops: Sequence[LoopTrace], turns: int) -> str:
    loop = [[b - a for a, b in itertools.pairwise(t.asked)] for t in loops]
    events = [t.event_seconds[1 : turns + 1] for t in loops]
    header = ["measurement", "ms/turn, all", *(f"turns {a}–{b}" for a, b in windows(turns))]
    rows = [
        row("1. `claw run` + FakeOpenAI over HTTP", per_turn(http.turns), turns),
        row("1a. of which in the fake server", per_turn(http.server), turns),
        row("2. claw's side (1 − 1a)", per_turn(http.client), turns),
        row("3. loop only (ScriptedLLM, no HTTP)", per_turn(loop), turns),
        row("3a. of which transcript + ledger writes", per_turn(events), turns),
    ]
    return table([*header, "last/first"], rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    turns: int = args.turns

    http = measure_http(turns, args.repeat)
    loops = [run_loop_only(turns) for _ in range(max(LOOP_REPEAT, args.repeat))]

    print(f"machine: {machine()}")
    print(
        f"{turns} turns + a final answer; per turn, the median of {args.repeat} runs "
        f"({len(loops)} for the loop only)\n"
    )
    print(turn_table(http, loops, turns), end="\n\n")
    spans = windows(turns)
    claw_side = per_turn(http.client)
    first, last = (window_mean(claw_side, *spans[i]) for i in (0, -1))
    met = "yes" if last / first <= FLAT else "**no**"
    print(
        f"claw's side (row 2), turns {spans[-1][0]}–{spans[-1][1]} ÷ turns {spans[0][0]}–"
        f"{spans[0][1]}: **{last / first:.2f}×** ({ms(first)} → {ms(last)} ms); goal: flat, "
        f"≤ {FLAT}× (issue 17); met: {met}. In process (CliRunner), beside the fake server's "
        "threads: bench/issue17.py measures the same across processes.\n"
    )
    kb, bodies = 1024, http.bodies
    print(
        f"request body: {bodies[0] / kb:.1f} KB on turn 1, {bodies[len(bodies) // 2] / kb:.1f} KB "
        f"mid-way, {bodies[-1] / kb:.1f} KB for the final answer; "
        f"transcript file: {loops[-1].transcript_bytes / kb:.0f} KB"
    )
    print(
        f"whole `claw run` (in-process, medians): {ms(statistics.median(http.walls), 0)} ms; "
        f"before the first request (project, prompt, system prompt, SDK client): "
        f"{ms(statistics.median(http.before))} ms; after the final answer (output, daily "
        f"note, ledger): {ms(statistics.median(http.after))} ms"
    )
    print("\nencoding one request (no HTTP), median of 7:\n")
    print(encoding_table(loops[-1].requests, turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())

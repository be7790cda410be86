"""A full run of many trivial jobs at zero latency: jobs per second, whether anything grows
faster than the number of jobs, and where the time goes.

One fan-out task over N input files (`foreach: "inbox/*.txt"`, output `out/{{ item.stem }}.md`);
tests/fake_openai.FakeOpenAI, in this process, answers every request at once with a one-line
final answer, so each job is one model turn. `claw run -j J` runs as a real child process (the
`claw` console script of this interpreter), without -q so that its progress output is part of
the measurement, for each size in --sizes, on a fresh project each time; and at -j 1 on the
smallest size.

Growth: per-job time over the whole run, in the first and the last tenth of the jobs (server
side: the gaps between requests), the fixed costs before the first request and after the last
reply, and what the run leaves behind per job (ledger, transcripts, daily note, progress output).

Then the same with a second fan-out over the first one's outputs (--chain-sizes items each):
a full run, a no-op, and the ledger's size per job.

Then a cProfile of one `claw run -j 1` of --profile-items jobs, in a child process, every thread
profiled (jobs run on a worker thread, each model call on a thread of its own).

    python bench/fullrun.py [--sizes 1000,2000,5000] [-j 4] [--chain-sizes 200,400,800]
                            [--profile-items 1000]

bench/noop.py and bench/parallel.py import this module's helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from _common import REPO, machine, ms, scratch, table, use_repo

use_repo()

from fake_openai import FakeOpenAI, Reply, _Handler, text  # noqa: E402

CLAW = str(Path(sys.executable).with_name("claw"))
FAN_OUT = """\
version: 1
model: fake-model
tasks:
  summarise:
    foreach: "inbox/*.txt"
    prompt: "Summarise {{{{ item.path }}}} in one line."
    output: "out/{{{{ item.stem }}}}.md"
{extra}"""
WORKSPACE = {"workspace/AGENTS.md": "# Agents\nBe brief.\n", "workspace/MEMORY.md": "- k: v\n"}


# -- projects and runs, shared with noop.py and parallel.py -----------------------------------


def fan_out_project(root: Path, items: int, extra: str = "") -> Path:
    """A project with one fan-out task over `items` files inbox/00000.txt, ...; `extra` is
    YAML appended after it: more keys of that task (4 spaces in), or more tasks (2 spaces)."""
    (root / "inbox").mkdir(parents=True)
    (root / "clawfile.yaml").write_text(FAN_OUT.format(extra=extra))
    for rel, content in WORKSPACE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    for n in range(items):
        (root / "inbox" / f"{n:05d}.txt").write_text(f"message {n}: the printer is on fire\n")
    return root


def fake_env(srv: FakeOpenAI) -> dict[str, str]:
    return {
        **os.environ,
        "OPENAI_BASE_URL": srv.base_url,
        "OPENAI_API_KEY": "sk-bench-0123456789abcdef",
        "NO_PROXY": "127.0.0.1",
    }


@dataclass(frozen=True)
class Finished:
    wall: float  # seconds, perf_counter
    cpu: float  # user + system seconds of the child
    started: float  # perf_counter when the child was started
    stderr: str


def run_claw(
    root: Path, args: Sequence[str], env: Mapping[str, str], argv: Sequence[str] = (CLAW,)
) -> Finished:
    """One `claw` child process in `root`; exits the benchmark if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [*argv, *args], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    stderr = done.stderr.decode("utf-8", errors="replace")
    if done.returncode != 0:
        sys.exit(f"claw {' '.join(args)} failed ({done.returncode}):\n{stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Finished(wall, cpu, started, stderr)


@dataclass(frozen=True)
class Visit:
    arrived: float  # perf_counter when the server began handling a request
    served: float  # ... and when it had sent the reply


class TimedHandler(_Handler):
    # Keep-alive, as real endpoints do: with FakeOpenAI's HTTP/1.0 every request would open a
    # new connection, and the benchmark would measure TCP set-up on both sides.
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else headers and body wait on delayed ACKs (40 ms)
    visits: ClassVar[list[Visit]] = []  # one server at a time is enough for a benchmark

    def do_POST(self) -> None:
        arrived = time.perf_counter()
        super().do_POST()
        TimedHandler.visits.append(Visit(arrived, time.perf_counter()))


@contextmanager
def timed_fake(
    handler: Callable[[dict[str, Any]], Reply], latency: float = 0.0
) -> Iterator[FakeOpenAI]:
    """FakeOpenAI answering with `handler`; TimedHandler.visits records each request."""
    with FakeOpenAI() as srv:
        srv._server.RequestHandlerClass = TimedHandler  # socketserver's documented attribute
        srv.handler = handler
        srv.latency = latency
        TimedHandler.visits = []
        yield srv


def load() -> str:
    """The 1-minute load average: on 2 cores, anything above ~1 besides us shows in the times."""
    return f"load average {os.getloadavg()[0]:.1f}"


def revision() -> str:
    """The commit benchmarked, and whether claw_batch had uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--", "claw_batch")
    return f"{commit} + uncommitted changes to claw_batch" if changed else commit


# -- profiling a child process, every thread ---------------------------------------------------

# Runs `claw` in-process under cProfile, one profiler per thread (cProfile sees only the thread
# that enabled it), and dumps the merged stats; argv: stats file, then claw's arguments.
PROBE = """
import cProfile, json, pstats, sys, threading, time
profiles = []
_run = threading.Thread.run
def run(self):
    profile = cProfile.Profile()
    profiles.append(profile)
    profile.enable()
    try:
        _run(self)
    finally:
        profile.disable()
threading.Thread.run = run
main_profile = cProfile.Profile()
started = time.perf_counter()
main_profile.enable()
from claw_batch.cli import main
try:
    main(sys.argv[2:], prog_name="claw")
except SystemExit as e:
    code = e.code
main_profile.disable()
wall = time.perf_counter() - started
stats = pstats.Stats(main_profile)
for p in profiles:
    stats.add(p)
stats.dump_stats(sys.argv[1])
info = {"exit": code, "wall": wall, "threads": len(profiles), "openai": "openai" in sys.modules}
with open(sys.argv[1] + ".json", "w") as f:
    json.dump(info, f)
"""


@dataclass
class Profiled:
    stats: pstats.Stats
    wall: float  # seconds inside main(), profiler overhead included
    threads: int
    imported_openai: bool


def profile_claw(root: Path, args: Sequence[str], env: Mapping[str, str]) -> Profiled:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "claw.prof"
        run_claw(root, [str(out), *args], env, argv=(sys.executable, "-c", PROBE))
        info = json.loads(Path(f"{out}.json").read_text())
        if info["exit"] not in (0, None):
            sys.exit(f"profiled claw {' '.join(args)} exited {info['exit']}")
        return Profiled(pstats.Stats(str(out)), info["wall"], info["threads"], info["openai"])


# Frames that only wait, or only dispatch: they would top any cumulative list and say nothing.
NOISE_FILES = (
    "threading.py",
    "concurrent/futures",
    "selectors.py",
    "click/",
    "<frozen",
    "<string>",
)
NOISE_NAMES = ("'acquire'", "'get' of '_queue", "builtins.exec>", "<built-in method _thread")


def label(func: tuple[str, int, str]) -> str:
    path, line, name = func
    if path == "~":
        return name
    for marker in ("claw_batch/", "site-packages/", "python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            path = f"claw_batch/{path}" if marker == "claw_batch/" else path
            break
    return f"{path}:{line}({name})"


def _rows(stats: pstats.Stats) -> list[tuple[tuple[str, int, str], int, float, float]]:
    """(function, calls, own seconds, cumulative seconds) for every profiled function."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return [(func, nc, tt, ct) for func, (_cc, nc, tt, ct, _callers) in raw.items()]


def _noise(func: tuple[str, int, str]) -> bool:
    path, _, name = func
    return any(n in path for n in NOISE_FILES) or any(n in name for n in NOISE_NAMES)


def top_table(
    stats: pstats.Stats, jobs: int, *, own: bool = False, top: int = 20, micro: bool = False
) -> str:
    """The top functions by cumulative (or own) time, waits and dispatch frames left out; per
    job in ms, or in µs when `micro`."""

    def seconds(row: tuple[Any, int, float, float]) -> float:
        return row[2] if own else row[3]

    unit, scale = ("µs", 1e6) if micro else ("ms", 1e3)
    rows = sorted((r for r in _rows(stats) if not _noise(r[0])), key=seconds, reverse=True)
    kind = "own" if own else "cumulative"
    return table(
        ("function", "calls", f"{kind} s", f"{unit} per job"),
        [
            (f"`{label(r[0])}`", r[1], f"{seconds(r):.2f}", f"{seconds(r) / jobs * scale:.2f}")
            for r in rows[:top]
        ],
    )


def cumulative(stats: pstats.Stats, path_end: str, name: str) -> tuple[int, float]:
    """Calls and cumulative seconds of one function (summed over same-named ones in a file)."""
    found = [(nc, ct) for f, nc, _, ct in _rows(stats) if f[0].endswith(path_end) and f[2] == name]
    return sum(n for n, _ in found), sum(c for _, c in found)


def phase_table(
    stats: pstats.Stats,
    phases: Sequence[tuple[str, str, str]],
    jobs: int,
    wall: float,
    *,
    micro: bool = False,
    per: str = "job",
) -> str:
    """Cumulative time of chosen functions, which may nest in one another; a function the
    code no longer has is left out. Per job (or `per`) in ms, or in µs when `micro`."""
    unit, scale = ("µs", 1e6) if micro else ("ms", 1e3)
    rows = []
    for what, path_end, name in phases:
        calls, seconds = cumulative(stats, path_end, name)
        if calls:
            per_job = f"{seconds / jobs * scale:.{1 if micro else 2}f}"
            share = f"{seconds / wall * 100:.0f} %"
            rows.append((what, f"`{path_end}:{name}`", calls, f"{seconds:.2f}", per_job, share))
    header = ("what", "function", "calls", "cumulative s", f"{unit} per {per}", "of the run")
    return table(header, rows)


def callee_tree(
    stats: pstats.Stats,
    path_end: str,
    name: str,
    jobs: int,
    *,
    depth: int = 4,
    share: float = 0.04,
    per: str = "job",
) -> str:
    """What one function spends its time on, as an indented text block: each callee with its
    cumulative time from that caller, down to `depth`, leaving out callees under `share` of
    the top function's time."""
    stats.calc_callees()
    callees: dict[Any, Any] = stats.all_callees  # type: ignore[attr-defined]
    lines: list[str] = []

    def walk(func: tuple[str, int, str], seconds: float, level: int, floor: float) -> None:
        lines.append(f"{'  ' * level}{label(func)}  {seconds / jobs * 1000:.2f} ms/{per}")
        if level == depth:
            return
        kids = sorted(callees.get(func, {}).items(), key=lambda kv: kv[1][3], reverse=True)
        for kid, (_cc, _nc, _tt, ct) in kids:
            if ct >= floor and not _noise(kid):
                walk(kid, ct, level + 1, floor)

    for func, _calls, _own, total in _rows(stats):
        if func[0].endswith(path_end) and func[2] == name:
            walk(func, total, 0, total * share)
    return "\n".join(lines)


# -- the full run -------------------------------------------------------------------------------

# Where a run's time goes; rows nest (a job contains its model call, its output write...).
PHASES = (
    ("imports (inside the run)", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("load the clawfile", "claw_batch/clawfile/load.py", "load_project"),
    ("glob the fan-out", "claw_batch/plan/jobs.py", "glob_files"),
    ("check a job: prepare, fingerprint, decide", "claw_batch/run/session.py", "check"),
    ("  prepare (prompt, output path, policy)", "claw_batch/run/prepare.py", "prepare"),
    ("  fingerprint", "claw_batch/run/prepare.py", "fingerprint_of"),
    ("  up-to-date decision (hashes outputs)", "claw_batch/plan/uptodate.py", "decide"),
    ("run a job", "claw_batch/run/job.py", "run_job"),
    ("  OpenAI client (imports openai), once", "claw_batch/llm/endpoints.py", "_make"),
    (
        "  system prompt (reads workspace files)",
        "claw_batch/agent/systemprompt.py",
        "build_system_prompt",
    ),
    ("  model call, waited for by the job", "claw_batch/llm/openai_compat.py", "complete"),
    ("    SDK post + HTTP", "claw_batch/llm/openai_compat.py", "_call"),
    ("  write the output (fsync, rename)", "claw_batch/safety/safeopen.py", "write_file"),
    ("  transcript: open", "claw_batch/store/transcript.py", "__init__"),
    ("  transcript: events", "claw_batch/store/transcript.py", "event"),
    ("  ledger: start_job", "claw_batch/store/state.py", "start_job"),
    ("  ledger: record_call", "claw_batch/store/state.py", "record_call"),
    ("  ledger: succeed_job", "claw_batch/store/state.py", "succeed_job"),
    ("progress lines", "claw_batch/terminal/progress.py", "job_finished"),
    ("daily note", "claw_batch/run/closeout.py", "note"),
    ("end of run (hashes, notes, summary.json)", "claw_batch/run/closeout.py", "close"),
)


@dataclass(frozen=True)
class Growth:
    items: int
    jobs: int
    run: Finished
    before: float  # from starting the child to the first request
    after: float  # from the last reply to the child's exit
    first_tenth: float  # seconds per job between requests, first 10 % of the jobs
    last_tenth: float
    ledger: int  # bytes: .claw/state.db and its WAL
    transcripts: int  # bytes, all transcript files
    note: int  # bytes: the daily note
    summary: int  # bytes: summary.json
    progress: int  # bytes of progress output (stderr)


def dir_bytes(path: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in path.glob(pattern) if p.is_file())


def full_run(items: int, jobs: int) -> Growth:
    with scratch() as tmp, timed_fake(lambda body: text("done")) as srv:
        root = fan_out_project(Path(tmp) / "p", items)
        run = run_claw(root, ["run", "-j", str(jobs)], fake_env(srv))
        visits = sorted(TimedHandler.visits, key=lambda v: v.arrived)
        if len(visits) != items or len(list((root / "out").iterdir())) != items:
            sys.exit(f"expected {items} requests and outputs, got {len(visits)}")
        arrivals = [v.arrived for v in visits]
        tenth = max(1, items // 10)
        claw_dir = root / ".claw"
        return Growth(
            items=items,
            jobs=jobs,
            run=run,
            before=arrivals[0] - run.started,
            after=run.started + run.wall - max(v.served for v in visits),
            first_tenth=(arrivals[tenth] - arrivals[0]) / tenth,
            last_tenth=(arrivals[-1] - arrivals[-1 - tenth]) / tenth,
            ledger=dir_bytes(claw_dir, "state.db*"),
            transcripts=dir_bytes(claw_dir / "runs", "*/*.jsonl"),
            note=dir_bytes(root / "workspace" / "memory", "*.md"),
            summary=dir_bytes(claw_dir / "runs", "*/summary.json"),
            progress=len(run.stderr.encode()),
        )


def speed_table(runs: Sequence[Growth]) -> str:
    rows = [
        (
            g.items,
            g.jobs,
            f"{g.run.wall:.1f}",
            f"{g.items / g.run.wall:.0f}",
            ms(g.run.wall / g.items, 2),
            ms(g.run.cpu / g.items, 2),
            ms(g.first_tenth, 2),
            ms(g.last_tenth, 2),
            f"{g.last_tenth / g.first_tenth:.2f}",
            f"{g.before:.2f}",
            f"{g.after:.2f}",
        )
        for g in runs
    ]
    header = (
        "jobs",
        "-j",
        "wall s",
        "jobs/s",
        "ms/job",
        "CPU ms/job",
        "ms/job, first 10 %",
        "last 10 %",
        "last/first",
        "before 1st request s",
        "after last reply s",
    )
    return table(header, rows)


def footprint_table(runs: Sequence[Growth]) -> str:
    def per_job(size: int, g: Growth) -> str:
        return f"{size / g.items:.0f}"

    rows = [
        (
            g.items,
            g.jobs,
            per_job(g.ledger, g),
            per_job(g.transcripts, g),
            per_job(g.progress, g),
            per_job(g.summary, g),
            g.note,
        )
        for g in runs
    ]
    header = (
        "jobs",
        "-j",
        "ledger B/job",
        "transcripts B/job",
        "progress output B/job",
        "summary.json B/job",
        "daily note B (whole)",
    )
    return table(header, rows)


# A second fan-out over the first one's outputs: its jobs depend on the first task's.
DOWNSTREAM = """\
  digest:
    foreach: "out/*.md"
    prompt: "Digest {{ item.path }}."
    output: "digest/{{ item.stem }}.md"
"""


@dataclass(frozen=True)
class Chain:
    items: int  # per task; the run has twice as many jobs
    run: Finished
    noop: Finished
    ledger: int  # bytes: .claw/state.db and its WAL


def chain_run(items: int, jobs: int) -> Chain:
    """Two chained fan-outs of `items` jobs each: a full run, then a no-op."""
    with scratch() as tmp, timed_fake(lambda body: text("done")) as srv:
        root = fan_out_project(Path(tmp) / "p", items, DOWNSTREAM)
        run = run_claw(root, ["run", "-q", "-j", str(jobs)], fake_env(srv))
        if len(srv.requests) != 2 * items:
            sys.exit(f"chain: expected {2 * items} requests, got {len(srv.requests)}")
        noop = run_claw(root, ["run", "-q"], fake_env(srv))
        return Chain(items, run, noop, dir_bytes(root / ".claw", "state.db*"))


def chain_table(chains: Sequence[Chain]) -> str:
    rows = [
        (
            c.items,
            2 * c.items,
            ms(c.run.wall / (2 * c.items), 2),
            f"{c.noop.wall:.2f}",
            f"{c.noop.wall / (2 * c.items) * 1e6:.0f}",
            f"{c.ledger / (2 * c.items) / 1024:.1f}",
        )
        for c in chains
    ]
    header = (
        "items per task",
        "jobs",
        "full run ms/job",
        "no-op s",
        "no-op µs/job",
        "ledger KB/job",
    )
    return table(header, rows)


def profile_full_run(items: int) -> tuple[Profiled, int]:
    with scratch() as tmp, timed_fake(lambda body: text("done")) as srv:
        root = fan_out_project(Path(tmp) / "p", items)
        profiled = profile_claw(root, ["run", "-C", str(root), "-j", "1"], fake_env(srv))
        return profiled, len(srv.requests)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,2000,5000", help="job counts, comma-separated")
    parser.add_argument("-j", "--jobs", type=int, default=4)
    parser.add_argument("--chain-sizes", default="200,400,800", help="items per chained task")
    parser.add_argument("--profile-items", type=int, default=1000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    chain_sizes = [int(s) for s in args.chain_sizes.split(",")]

    print(f"machine: {machine()}; claw_batch at {revision()}; {load()}\n")
    started = time.perf_counter()
    runs = [full_run(n, args.jobs) for n in sizes]
    runs.append(full_run(sizes[0], 1))
    print("`claw run -j J` over N trivial jobs (one turn each), zero latency:\n")
    print(speed_table(runs), end="\n\n")
    print("what the run leaves behind, per job:\n")
    print(footprint_table(runs), end="\n\n")
    chains = [chain_run(n, args.jobs) for n in chain_sizes]
    print(f"two chained fan-outs (`digest` over `out/*.md`), `-j {args.jobs}`, then a no-op:\n")
    print(chain_table(chains), end="\n\n")

    profiled, requests = profile_full_run(args.profile_items)
    n = args.profile_items
    print(
        f"cProfile of `claw run -j 1` over {n} jobs ({requests} requests, "
        f"{profiled.threads} threads profiled): {profiled.wall:.1f} s in main() under the "
        f"profiler, {ms(profiled.wall / n, 2)} ms per job\n"
    )
    print(phase_table(profiled.stats, PHASES, n, profiled.wall), end="\n\n")
    print("running one job, by callee (cumulative, from that caller):\n")
    print(f"```\n{callee_tree(profiled.stats, 'claw_batch/session.py', 'execute', n)}\n```\n")
    print("top functions by own time (waits left out):\n")
    print(top_table(profiled.stats, n, own=True), end="\n\n")
    print(f"the script took {time.perf_counter() - started:.0f} s; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

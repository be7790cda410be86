"""Issue 17's table: each measure as a user would time it, its goal, and whether it is met.

Every figure comes from real `claw` child processes (bench/child.py: wall time from spawn to
exit; CPU and peak memory from wait4, workers included; the process tree's memory sampled
where it is judged) against bench/leanfake.py, a lean fake endpoint in a process of its own.

1. 200 jobs at `-j 32` and `-j 100`, 2,000 jobs at `-j 200`; 100 ms a turn, 3 turns a job (read
   the item, ls, answer): ideal / whole run, ideal = ceil(jobs / j) × 3 × 0.1 s
   (bench/parallel.py's runs; the median of --repeat by whole-run time).
2. claw's CPU per model turn: the 2,000-job run's CPU, start-up included, ÷ its 6,000 turns.
3. start-up of a run that calls a model: spawn → the first request at the server, one job.
4. `claw list` in a copy of this repository's example project, after one warm-up run.
5. 100,000 jobs run against the fake endpoint (one turn, zero latency, `-j 16`): wall time and
   peak memory; the cost per job after start-up at 1,000 / 10,000 / 100,000, for linearity.
6. those 100,000 jobs up to date: the no-op (bench/noop.py's), `make -r` and `ninja` beside it.
7. the per-turn overhead across 100 turns: claw's side of each turn (the gap between two
   requests' arrivals less the server's time on the first), turns 90–100 over turns 1–10.
8. the peer for a batch of prompts: the same prompts (one turn, 100 ms) through claw `-j 32` and
   through simonw's `llm` in `xargs -P 32`, each prompt its own process, as a user scripts it.

`--quick` runs smaller sizes, once each, and judges only the rows run at the issue's sizes.
The script reports, it does not gate: exit 0 when a goal is missed, non-zero when a run fails.

    python bench/issue17.py [--quick] [--repeat 3] [--only parallel,startup,list,scale,...]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _common import REPO, machine, scratch, table, use_repo
from child import spawn
from leanfake import LeanServer

use_repo()

import loop_overhead  # noqa: E402
import noop  # noqa: E402
import parallel  # noqa: E402
import startup  # noqa: E402
from fullrun import fan_out_project, load, revision  # noqa: E402

CPU_PER_TURN = 0.8  # ms
STARTUP = 0.20  # s
LIST = 0.15  # s
NOOP = 1.0  # s, at 100,000 jobs
MEMORY = 150  # MB, at 100,000 jobs
FLAT = 1.25  # turns 90–100 ÷ turns 1–10: what "flat" is taken to mean
LINEAR = 1.25  # per-job cost at the largest size ÷ at the smallest
SCALE_JOBS = 16
PEER_JOBS = 32
BIG = 100_000


@dataclass(frozen=True)
class Row:
    measure: str
    command: str
    figure: str
    goal: str
    met: bool | None  # None: not judged (a peer, or a size that is not the issue's)


def verdict(met: bool | None) -> str:
    return "—" if met is None else ("yes" if met else "**no**")


def goal_table(rows: Sequence[Row]) -> str:
    return table(
        ("measure", "command", "figure", "goal", "met"),
        [(r.measure, f"`{r.command}`", r.figure, r.goal, verdict(r.met)) for r in rows],
    )


# -- 1, 2: 100 ms a turn -------------------------------------------------------------------------


def parallel_rows(repeat: int, quick: bool) -> tuple[list[Row], list[parallel.Run]]:
    levels = [(200, 32), (200, 100), (600, 200) if quick else (2000, 200)]
    runs = [
        parallel.median_run([parallel.run_at(n, j, 0.1) for _ in range(repeat)]) for n, j in levels
    ]
    rows = [
        Row(
            f"{r.items:,} jobs, `-j {r.jobs}`, 100 ms a turn, 3 turns: ideal / whole run",
            f"claw run -q -j {r.jobs}",
            f"{r.efficiency:.2f} ({r.ideal:.1f} / {r.run.wall:.2f} s)",
            "—" if r.goal is None else f"≥ {r.goal:.2f}",
            None if r.goal is None else r.efficiency >= r.goal,
        )
        for r in runs
    ]
    big = runs[-1]
    per_turn = big.run.cpu / (big.items * parallel.TURNS) * 1000
    rows.append(
        Row(
            f"claw's CPU per model turn ({big.items:,} jobs: whole run's CPU, start-up and "
            "workers included, ÷ turns)",
            f"claw run -q -j {big.jobs}",
            f"{per_turn:.2f} ms",
            f"≤ {CPU_PER_TURN} ms",
            None if quick else per_turn <= CPU_PER_TURN,
        )
    )
    return rows, runs


def marginal_cpu(runs: Sequence[parallel.Run]) -> str:
    """CPU per turn between the smallest and the largest run: start-up taken out."""
    small, big = runs[0], runs[-1]
    turns = (big.items - small.items) * parallel.TURNS
    return f"{(big.run.cpu - small.run.cpu) / turns * 1000:.2f} ms"


# -- 3, 4: start-up ------------------------------------------------------------------------------


def startup_rows(runs: int) -> list[Row]:
    """Judged in a project that has run before (every run but a project's first: cron, hooks,
    watch); a project's very first run, which validates its clawfile, is reported beside it."""
    rows = []
    for ran_before, what in (
        (True, "a project that ran before"),
        (False, "a project's first run (validates the clawfile)"),
    ):
        firsts = startup.first_requests(runs, ran_before=ran_before)
        first = statistics.median(firsts)
        rows.append(
            Row(
                f"start-up of a run that calls a model: spawn → first request at the server "
                f"(1 job; {what})",
                "claw run -q -B",
                f"{first:.3f} s (median of {runs}; min {min(firsts):.3f})",
                f"≤ {STARTUP:.2f} s" if ran_before else "(reported)",
                first <= STARTUP if ran_before else None,
            )
        )
    return rows


def example_copy(root: Path) -> Path:
    root.mkdir(parents=True)
    for rel in ("clawfile.yaml", "prompts", "skills", "workspace"):
        source = REPO / rel
        if source.is_dir():
            shutil.copytree(source, root / rel)
        elif source.exists():
            shutil.copy(source, root / rel)
    return root


def list_row(runs: int) -> Row:
    with scratch() as tmp, LeanServer("done") as srv:
        root = example_copy(Path(tmp) / "example")
        spawn(["list"], root, srv.env())  # warm-up: bytecode, page cache, the config cache
        walls = [spawn(["list"], root, srv.env()).wall for _ in range(runs)]
    wall = statistics.median(walls)
    return Row(
        "`claw list`, the example project",
        "claw list",
        f"{wall:.3f} s (median of {runs}; min {min(walls):.3f})",
        f"≤ {LIST:.2f} s",
        wall <= LIST,
    )


# -- 5, 6: scale ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scaled:
    items: int
    wall: float
    startup: float  # spawn → first request
    cpu: float
    maxrss_mb: float  # the largest single process (wait4)
    tree_mb: float  # the process tree summed, sampled

    @property
    def memory_mb(self) -> float:
        return max(self.maxrss_mb, self.tree_mb)

    @property
    def per_job_ms(self) -> float:
        return (self.wall - self.startup) / self.items * 1000


def scale_rows(sizes: Sequence[int], runs: int) -> tuple[list[Row], str]:
    scaled = []
    with scratch() as tmp, LeanServer("done") as srv:
        env = srv.env()
        for items in sizes:
            root = fan_out_project(Path(tmp) / f"p{items}", items)
            run = spawn(["run", "-q", "-j", str(SCALE_JOBS)], root, env, sample=True)
            stats = srv.stats()
            if stats.requests != items:
                sys.exit(f"scale: expected {items} requests, got {stats.requests}")
            startup = stats.arrived[0] - run.started
            scaled.append(Scaled(items, run.wall, startup, run.cpu, run.maxrss_mb, run.tree_mb))
        make_path, ninja_path = noop.build_files(Path(tmp), root, sizes[-1])
        record = Path(tmp) / "stats.json"
        noop.record_stats(root, record)
        project = noop.Project(root, make_path, ninja_path, record, run)
        done = noop.no_ops(project, sizes[-1], env, runs)
        if done.failures or srv.stats().requests:
            sys.exit(f"the no-op failed: {done.failures or 'it made requests'}")
    big, small = scaled[-1], scaled[0]
    judged = big.items == BIG
    claw, make, ninja = (statistics.median(v) for v in (done.claw, done.make, done.ninja))
    rows = [
        Row(
            f"{big.items:,} jobs run against the fake endpoint (one turn, zero latency): "
            "peak memory (the largest process, or the process tree summed)",
            f"claw run -q -j {SCALE_JOBS}",
            f"{big.memory_mb:.0f} MB (the run: {big.wall:.0f} s)",
            f"≤ {MEMORY} MB at {BIG:,}",
            big.memory_mb <= MEMORY if judged else None,
        ),
        Row(
            "cost per job after start-up, for linearity",
            f"claw run -q -j {SCALE_JOBS}",
            ", ".join(f"{s.per_job_ms:.2f} ms at {s.items:,}" for s in scaled),
            f"largest ≤ {LINEAR} × smallest",
            big.per_job_ms <= LINEAR * small.per_job_ms if len(scaled) > 1 else None,
        ),
        Row(
            f"{big.items:,} up-to-date jobs (median of {len(done.claw)}); peers in the same "
            "invocation",
            "claw run",
            f"{claw:.2f} s; `make -r` {make:.2f} s ({claw / make:.1f}×), `ninja` {ninja:.2f} s "
            f"({claw / ninja:.1f}×)",
            f"≤ {NOOP:.1f} s at {BIG:,}",
            claw <= NOOP if judged else None,
        ),
    ]
    header = ("jobs", "whole run s", "slice: start-up s", "ms/job after start-up")
    detail = table(
        (*header, "CPU ms/job", "peak MB: largest process", "process tree, sampled"),
        [
            (
                f"{s.items:,}",
                f"{s.wall:.1f}",
                f"{s.startup:.2f}",
                f"{s.per_job_ms:.2f}",
                f"{s.cpu / s.items * 1000:.2f}",
                f"{s.maxrss_mb:.0f}",
                f"{s.tree_mb:.0f}",
            )
            for s in scaled
        ],
    )
    return rows, detail


# -- 7: per-turn overhead ------------------------------------------------------------------------


def overhead_row(turns: int, repeat: int) -> tuple[Row, str]:
    runs = []
    with scratch() as tmp, LeanServer("reader", turns=turns) as srv:
        for n in range(repeat):
            root = loop_overhead.project(Path(tmp) / f"p{n}", turns)
            spawn(["run", "-q"], root, srv.env())
            stats = srv.stats()
            if stats.requests != turns + 1:
                sys.exit(f"overhead: expected {turns + 1} requests, got {stats.requests}")
            pairs = zip(stats.served[:-1], stats.arrived[1:], strict=True)
            runs.append([after - served for served, after in pairs])
    claw_side = loop_overhead.per_turn(runs)
    spans = loop_overhead.windows(turns)
    means = [loop_overhead.window_mean(claw_side, *span) * 1000 for span in spans]
    ratio = means[-1] / means[0]
    row = Row(
        f"per-turn overhead across {turns} turns (claw's side: reply sent → next request)",
        "claw run -q (a job that reads a file a turn)",
        " → ".join(f"{m:.2f}" for m in means) + f" ms ({ratio:.2f}×)",
        f"flat: ≤ {FLAT}×",
        ratio <= FLAT,
    )
    kb = [b / 1024 for b in (stats.body_bytes[0], stats.body_bytes[-1])]
    windows = ", ".join(f"turns {a}–{b}" for a, b in spans)
    detail = f"per-turn overhead windows: {windows}; request body {kb[0]:.1f} → {kb[1]:.0f} KB"
    return row, detail


# -- 8: the peer for a batch of prompts ----------------------------------------------------------

LLM_MODELS = """\
- model_id: fake-model
  model_name: fake-model
  api_base: "{base_url}"
"""
# As a user scripts it: one `llm` per prompt, 32 at a time, each answer to its own file;
# --no-log, since 32 of them logging at once into one SQLite file fail with "database is locked".
XARGS = (
    "ls inbox/*.txt | xargs -P {jobs} -I{{}} sh -c 'llm -m fake-model --no-log \"Summarise this in "
    'one line." < "$1" > "out/$(basename "$1" .txt).md"\' _ {{}}'
)


def peer_row(prompts: int) -> Row | None:
    llm = Path(sys.executable).with_name("llm")
    if not llm.exists():
        return None
    with scratch() as tmp, LeanServer("done", latency=0.1) as srv:
        home = Path(tmp) / "llm-home"
        home.mkdir()
        (home / "extra-openai-models.yaml").write_text(LLM_MODELS.format(base_url=srv.base_url))
        env = {**srv.env(), "LLM_USER_PATH": str(home), "PATH": f"{llm.parent}:/usr/bin:/bin"}
        project = fan_out_project(Path(tmp) / "c", prompts)
        claw = spawn(["run", "-q", "-j", str(PEER_JOBS)], project, env)
        # A user's llm has run before: its logs database exists (32 first runs at once race
        # to create it), and its modules are compiled.
        spawn(["llm", "-m", "fake-model", "--no-log", "hello"], Path(tmp), env, argv=())
        srv.stats()
        root = fan_out_project(Path(tmp) / "l", prompts)
        (root / "out").mkdir()
        peer = spawn(["sh", "-c", XARGS.format(jobs=PEER_JOBS)], root, env, argv=())
        if srv.stats().requests != prompts or len(list((root / "out").iterdir())) != prompts:
            sys.exit("the llm peer did not answer every prompt")
    return Row(
        f"{prompts} prompts, one turn, 100 ms: claw vs `llm` in `xargs -P {PEER_JOBS}` (peer)",
        f"claw run -q -j {PEER_JOBS}",
        f"{peer.wall / claw.wall:.0f}× faster: {claw.wall:.2f} s vs {peer.wall:.1f} s (CPU "
        f"{claw.cpu:.1f} s vs {peer.cpu:.0f} s)",
        "(a peer: reported)",
        None,
    )


PARTS = ("parallel", "startup", "list", "scale", "overhead", "peer")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one run each")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each parallel row")
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts")
    args = parser.parse_args()
    quick: bool = args.quick
    repeat = 1 if quick else args.repeat
    parts = set(args.only.split(","))
    began = time.perf_counter()
    print(f"machine: {machine()}; claw_batch at {revision()}; {load()}\n")

    rows: list[Row] = []
    details: list[str] = []
    if "parallel" in parts:
        found, runs = parallel_rows(repeat, quick)
        rows += found
        details.append(
            "the runs at 100 ms a turn (slices after the whole run, labelled; claw's CPU per "
            f"turn with start-up taken out, between the first and last: {marginal_cpu(runs)}):"
            f"\n\n{parallel.efficiency_table(runs)}"
        )
        threaded = [parallel.threaded_server_cpu(r.items, r.jobs, 0.1) for r in runs[:1]]
        details.append(
            "what the fake server costs (the lean one is what every row uses):\n\n"
            + parallel.server_table(runs[:1], threaded)
        )
    if "startup" in parts:
        rows.extend(startup_rows(3 if quick else 7))
    if "list" in parts:
        rows.append(list_row(5 if quick else 15))
    if "scale" in parts:
        sizes = (1_000, 5_000) if quick else (1_000, 10_000, BIG)
        found, detail = scale_rows(sizes, 3 if quick else 5)
        rows += found
        details.append(f"full runs, one turn a job, zero latency, `-j {SCALE_JOBS}`:\n\n{detail}")
    if "overhead" in parts:
        row, detail = overhead_row(100, 1 if quick else 3)
        rows.append(row)
        details.append(detail)
    if "peer" in parts:
        peer = peer_row(32 if quick else 100)
        rows += [peer] if peer else []
        details += [] if peer else ["the llm peer: skipped (pip install -e '.[bench]')"]

    print(goal_table(rows), end="\n\n")
    for detail in details:
        print(detail, end="\n\n")
    print(f"the script took {time.perf_counter() - began:.0f} s; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The no-op: `claw run` when all --items jobs of a fan-out are up to date (issue 17: 100,000
in ≤ 1.0 s, measured), next to `make -r` and `ninja` over equivalent build files.

The project is bench/fullrun.py's: one task, `foreach: "inbox/*.txt"` over --items input files,
output `out/{{ item.stem }}.md`. It is made up to date by claw itself: one real `claw run -q -j 16`
against bench/leanfake.py (its own process, zero latency; the run's speed and peak memory are
printed: data points for bench/fullrun.py). The Makefile, generated outside the project, has
one target per job, `out/N.md: inbox/N.txt`, every one of them up to date (`make -q` checks it
first); build.ninja has the same as build statements (`generator = 1`: ninja has no log of
commands claw ran, and would rebuild for that alone; it still loads and stats every one).

Then, interleaved, `claw run` (the console script, a real child process, without -q so that it
says how many jobs are up to date), `make -r -f Makefile` and `ninja` in the project, --runs
times each, or fewer once claw has used up --budget seconds; and, for scale, the least a no-op
can do in Python (list the inputs, stat each input and output, compare with recorded stat
keys). The fake server stays up: the no-op runs must not make a request. Then the imports of
one no-op (`python -X importtime -m claw_batch run`; `openai` must not be among them) and a
cProfile of one, every thread profiled.

    python bench/noop.py [--items 100000] [--runs 5] [--budget 60] [--setup-jobs 16]

Exits 1 if a no-op run imports openai, makes a request or does not find every job up to date.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import machine, median, ms, scratch, table, use_repo
from child import Child, spawn
from leanfake import LeanServer

use_repo()

from fullrun import (  # noqa: E402
    Profiled,
    fan_out_project,
    load,
    phase_table,
    profile_claw,
    revision,
    run_claw,
    top_table,
)

TARGET = 1.0  # seconds for 100,000 jobs: issue 17 (0.5 s for 10,000 was issue 3's)
TARGET_ITEMS = 100_000

# Where a no-op's time goes; rows nest. This process only: the forked child (plan/halves.py:
# its share of the stat pass, and the listing of a large task's fan-out) is not profiled.
PHASES = (
    ("imports (inside the run)", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("load the clawfile (validated-config cache)", "claw_batch/clawfile/load.py", "load_project"),
    ("open the ledger (its page check when not stamped)", "claw_batch/store/database.py", "_setup"),
    ("run under the lock", "claw_batch/run/runner.py", "_run"),
    (
        "  sweep the output folders' temp files",
        "claw_batch/safety/tempsweep.py",
        "sweep_run_folders",
    ),
    ("  a task's jobs, when its turn comes", "claw_batch/run/session.py", "_expand"),
    ("    a large task settled from its ledger", "claw_batch/plan/uptodate.py", "settle_task"),
    ("      load the ledger: the task's seals", "claw_batch/store/state.py", "sealed"),
    ("      the task key, once per task", "claw_batch/plan/quickcheck.py", "of"),
    (
        "      the stat pass: this process's chunks, then the child's answer",
        "claw_batch/plan/halves.py",
        "shared",
    ),
    ("        stat item and output", "claw_batch/store/filehash.py", "stamp_pair"),
    (
        "    glob the fan-out here (not settled from the ledger)",
        "claw_batch/plan/jobs.py",
        "glob_files",
    ),
    ("  a task's jobs, checked together", "claw_batch/run/session.py", "settle_all"),
    (
        "    quick check of every job (not settled)",
        "claw_batch/plan/quickcheck.py",
        "all_unchanged",
    ),
    ("  a job checked on its own (not taken)", "claw_batch/run/session.py", "check"),
    ("  full check: prepare (not taken)", "claw_batch/run/prepare.py", "prepare"),
    ("  progress", "claw_batch/terminal/progress.py", "jobs_up_to_date"),
    ("  end of run", "claw_batch/run/closeout.py", "close"),
)

# For scale, the least a no-op can do in Python: list the inputs, stat each input and output,
# compare with the (mtime, size, inode) recorded after the setup run. argv: the record.
FLOOR = """
import json, os, sys
def key(path):
    st = os.stat(path)
    return [st.st_mtime_ns, st.st_size, st.st_ino]
recorded = json.load(open(sys.argv[1]))
stale = 0
for entry in os.scandir("inbox"):
    if entry.name.endswith(".txt"):
        item, output = "inbox/" + entry.name, "out/" + entry.name[:-4] + ".md"
        stale += recorded.get(item) != [key(item), key(output)]
sys.exit(1 if stale else 0)
"""


def record_stats(root: Path, path: Path) -> None:
    """What FLOOR compares with: each item's and output's (mtime, size, inode)."""

    def key(p: Path) -> list[int]:
        st = p.stat()
        return [st.st_mtime_ns, st.st_size, st.st_ino]

    keys = {
        f"inbox/{item.name}": [key(item), key(root / "out" / f"{item.stem}.md")]
        for item in (root / "inbox").glob("*.txt")
    }
    path.write_text(json.dumps(keys))


def run_floor(root: Path, record: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", FLOOR, str(record)], cwd=root)
    if done.returncode != 0:
        sys.exit("the stat-only check found a job out of date")
    return time.perf_counter() - started


def makefile(items: int) -> str:
    outputs = [f"out/{n:05d}.md" for n in range(items)]
    lines = [".PHONY: all", "all: " + " ".join(outputs), ""]
    for n, out in enumerate(outputs):
        lines += [f"{out}: inbox/{n:05d}.txt", "\tcp $< $@"]
    return "\n".join(lines) + "\n"


def ninja_file(items: int) -> str:
    """One build statement per job. `generator = 1` because ninja has no log of the commands
    that built these outputs (claw did): without it ninja would rebuild each for that alone;
    with it ninja still loads every statement and stats every input and output."""
    lines = ["rule cp", "  command = cp $in $out", "  generator = 1", ""]
    lines += [f"build out/{n:05d}.md: cp inbox/{n:05d}.txt" for n in range(items)]
    return "\n".join(lines) + "\n"


def run_ninja(root: Path, path: Path) -> tuple[float, str]:
    """ninja's wall time and what it said (`no work to do.` when up to date)."""
    started = time.perf_counter()
    done = subprocess.run(["ninja", "-f", str(path)], cwd=root, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout + done.stderr


def run_make(root: Path, path: Path, *args: str) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(
        ["make", "-r", "-f", str(path), *args],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started, done.returncode


@dataclass(frozen=True)
class Imports:
    modules: dict[str, float]  # module -> its own import time, seconds
    total: float  # seconds, the top-level imports' cumulative times summed
    wall: float  # of the run they were measured in

    def by_package(self, top: int = 8) -> str:
        cost: dict[str, float] = {}
        for module, seconds in self.modules.items():
            package = module.split(".")[0]
            cost[package] = cost.get(package, 0.0) + seconds
        slowest = sorted(cost.items(), key=lambda kv: kv[1], reverse=True)[:top]
        rows = [(f"`{package}`", ms(seconds)) for package, seconds in slowest]
        return table(("package", "own import ms, all its modules"), rows)


def import_times(root: Path, env: dict[str, str]) -> Imports:
    argv = (sys.executable, "-X", "importtime", "-m", "claw_batch")
    finished = run_claw(root, ["run", "-q"], env, argv=argv)
    modules: dict[str, float] = {}
    total_us = 0
    for line in finished.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if found:
            modules[found[4]] = int(found[1]) / 1e6
            if len(found[3]) == 1:  # depth 0
                total_us += int(found[2])
    return Imports(modules, total_us / 1e6, finished.wall)


def timing_table(done: NoOps, items: int) -> str:
    claw, make, ninja = done.claw, done.make, done.ninja
    commands = (
        ("`claw run`", claw),
        ("`make -r`", make),
        ("`ninja`", ninja),
        ("Python floor: scandir + 2 stats a job, no claw", done.floor),
    )
    rows: list[tuple[object, ...]] = [
        (
            name,
            len(values),
            ms(min(values)),
            ms(median(values)),
            f"{median(values) / items * 1e6:.1f}",
        )
        for name, values in commands
    ]
    rows.append(
        (
            "claw / make",
            "",
            f"{min(claw) / min(make):.1f}×",
            f"{median(claw) / median(make):.1f}×",
            "",
        )
    )
    rows.append(
        (
            "claw / ninja",
            "",
            f"{min(claw) / min(ninja):.1f}×",
            f"{median(claw) / median(ninja):.1f}×",
            "",
        )
    )
    return table(("command", "runs", "min ms", "median ms", "µs per job (median)"), rows)


@dataclass
class NoOps:
    first: float = 0.0  # the first no-op after the setup run: it validates the clawfile
    touched: float = 0.0  # after touching every input: the full check, which reseals
    claw: list[float] = field(default_factory=list)  # wall seconds per run
    make: list[float] = field(default_factory=list)
    ninja: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Project:
    root: Path
    makefile: Path  # outside the project
    ninja: Path  # outside the project too
    record: Path  # the stat keys the Python floor compares with
    setup: Child  # the run that made every job up to date


def build_files(tmp: Path, root: Path, items: int) -> tuple[Path, Path]:
    """A Makefile and a build.ninja equivalent to the fan-out, both found up to date."""
    for tool, package in (("make", "make"), ("ninja", "ninja-build")):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed: the peers of the no-op (apt-get install {package})")
    make_path, ninja_path = tmp / "Makefile", tmp / "build.ninja"
    make_path.write_text(makefile(items))
    ninja_path.write_text(ninja_file(items))
    if run_make(root, make_path, "-q")[1] != 0:
        sys.exit("make -q: the generated Makefile is not up to date")
    if "no work to do" not in run_ninja(root, ninja_path)[1]:
        sys.exit("ninja: the generated build.ninja is not up to date")
    return make_path, ninja_path


def set_up(tmp: Path, items: int, env: dict[str, str], jobs: int) -> Project:
    """The project made up to date by claw (a real run against the lean server), the
    equivalent Makefile and build.ninja, the stat record."""
    root = fan_out_project(tmp / "p", items)
    setup = spawn(["run", "-q", "-j", str(jobs)], root, env, sample=True)
    print(
        f"setup: `claw run -q -j {jobs}` ran the {items} jobs in {setup.wall:.1f} s "
        f"({items / setup.wall:.0f} jobs/s, {setup.cpu / items * 1000:.2f} ms of CPU a job, "
        f"peak memory {setup.memory_mb:.0f} MB)"
    )
    make_path, ninja_path = build_files(tmp, root, items)
    record = tmp / "stats.json"
    record_stats(root, record)
    return Project(root, make_path, ninja_path, record, setup)


def no_ops(
    project: Project, items: int, env: dict[str, str], runs: int, budget: float = 60.0
) -> NoOps:
    """claw, make, ninja and the floor, interleaved, until `runs` or claw's `budget`
    (seconds) is used up."""
    root = project.root
    done = NoOps()
    done.first = spawn(["run"], root, env).wall  # also writes .claw/clawfile.json
    while len(done.claw) < runs and (not done.claw or sum(done.claw) < budget):
        finished = spawn(["run"], root, env)
        done.claw.append(finished.wall)
        if f"{items} jobs up to date" not in finished.stderr:
            done.failures.append(f"not every job was up to date: {finished.stderr[-500:]!r}")
        done.make.append(run_make(root, project.makefile)[0])
        ninja, said = run_ninja(root, project.ninja)
        done.ninja.append(ninja)
        if "no work to do" not in said:
            done.failures.append(f"ninja found work to do: {said[-300:]!r}")
        done.floor.append(run_floor(root, project.record))
    return done


def touched_run(root: Path, env: dict[str, str], items: int) -> tuple[float, float]:
    """Touch every input (same bytes, new mtime): make would rebuild all; claw takes the full
    check for each job, finds it up to date by content and reseals it. Then one more no-op."""
    now = time.time()
    for item in (root / "inbox").iterdir():
        os.utime(item, (now, now))
    touched = run_claw(root, ["run"], env)
    if f"{items} jobs up to date" not in touched.stderr:
        sys.exit(f"after touching the inputs, not every job was up to date: {touched.stderr!r}")
    return touched.wall, run_claw(root, ["run"], env).wall


def check_table(imports: Imports, openai: bool, requests: int) -> str:
    rows: list[tuple[object, ...]] = [
        ("requests made by all no-op runs", requests),
        ("no-op imports `openai` (-X importtime; profiled run)", "yes" if openai else "no"),
        ("modules imported (-X importtime)", len(imports.modules)),
        ("import time, -X importtime total", f"{ms(imports.total)} ms"),
        ("… of that run's wall time", f"{imports.total / imports.wall * 100:.0f} %"),
        ("… of the target", f"{imports.total / TARGET * 100:.0f} %"),
    ]
    return table(("check", "result"), rows)


def print_profile(profiled: Profiled, items: int) -> None:
    print(
        f"cProfile of one no-op (`claw run -q`, in a child process, every thread): "
        f"{profiled.wall:.1f} s in main() under the profiler, "
        f"{profiled.wall / items * 1e6:.0f} µs per job\n"
    )
    print(phase_table(profiled.stats, PHASES, items, profiled.wall, micro=True), end="\n\n")
    print("top functions by cumulative time (waits and dispatch frames left out):\n")
    print(top_table(profiled.stats, items, top=25, micro=True), end="\n\n")
    print("top functions by own time:\n")
    print(top_table(profiled.stats, items, own=True, top=15, micro=True), end="\n\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=TARGET_ITEMS)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of claw no-ops")
    parser.add_argument("--setup-jobs", type=int, default=16, help="-j of the setup run")
    args = parser.parse_args()
    items: int = args.items
    began = time.perf_counter()
    print(f"machine: {machine()}; claw_batch at {revision()}; {load()}\n")

    with scratch() as tmp, LeanServer("done") as srv:
        env = srv.env()
        project = set_up(Path(tmp), items, env, args.setup_jobs)
        srv.stats()  # from here on, every request is one too many
        done = no_ops(project, items, env, args.runs, args.budget)
        root = project.root
        imports = import_times(root, env)
        profiled = profile_claw(root, ["run", "-C", str(root), "-q"], env)
        done.touched, after_touch = touched_run(root, env, items)
        requests = srv.stats().requests

    print(f"\nno-op over {items} up-to-date jobs and {items} input files:\n")
    print(timing_table(done, items), end="\n\n")
    typical = median(done.claw)
    if items == TARGET_ITEMS:
        met = "yes" if typical <= TARGET else "**no**"
    else:
        met = f"not judged at {items} jobs"
    print(
        f"**the whole no-op: median {typical:.2f} s** (min {min(done.claw):.2f} s); goal ≤ "
        f"{TARGET} s at {TARGET_ITEMS:,} jobs; met: {met}. `make -r` "
        f"{median(done.make):.2f} s, `ninja` {median(done.ninja):.2f} s in the same invocation.\n"
    )
    print(
        table(
            ("other `claw run`s over the same project", "wall ms"),
            [
                (
                    "the first no-op after the setup run (validates, caches the clawfile)",
                    ms(done.first),
                ),
                (
                    "after touching every input: full check of each job, which reseals it",
                    ms(done.touched),
                ),
                ("the no-op after that", ms(after_touch)),
            ],
        ),
        end="\n\n",
    )
    openai = profiled.imported_openai or any(m.split(".")[0] == "openai" for m in imports.modules)
    print(check_table(imports, openai, requests), end="\n\n")
    print("what the no-op imports, by package:\n")
    print(imports.by_package(), end="\n\n")
    print_profile(profiled, items)
    print(f"the script took {time.perf_counter() - began:.0f} s; {load()}")
    failures = done.failures
    failures += ["a no-op run imported openai"] if openai else []
    failures += [f"the no-op runs made {requests} requests"] if requests else []
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

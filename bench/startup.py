"""Start-up time of `claw --version`, `claw list` and `claw validate` against `python -c pass`,
and of a run that calls a model: from spawning `claw run` to its first request reaching the
fake endpoint (bench/leanfake.py, its own process; both clocks CLOCK_MONOTONIC), one job.
Goals (issue 17): `claw list` ≤ 0.15 s, the first request ≤ 0.20 s after the spawn.

Each command runs as a real child process with this interpreter, in the repository (its own
example project), `--runs` times, interleaved so that background noise hits them alike.
`claw` is run as `python -m claw_batch`, which is what the `claw` console script does.

Then, as a check: `claw --version`, `claw list` and `claw validate` must not import `openai`
(STYLE.md: only a model call pays for it); the script exits 1 if one of them does. Last, the
ten imports with the largest cumulative time under `python -X importtime -m claw_batch list`.

    python bench/startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _common import REPO, machine, median, ms, p90, scratch, table
from child import spawn
from leanfake import LeanServer

CLAW = [sys.executable, "-m", "claw_batch"]
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "claw --version": [*CLAW, "--version"],
    "claw list": [*CLAW, "list"],
    "claw validate": [*CLAW, "validate"],
}
# What the lazy import of the OpenAI adapter saves, for scale; slow, so fewer runs.
REFERENCE = ("python -c 'import openai'", [sys.executable, "-c", "import openai"])
REFERENCE_RUNS = 3
MUST_NOT_IMPORT = "openai"
LIST_GOAL = 0.15  # seconds, median: issue 17
FIRST_REQUEST_GOAL = 0.20  # seconds, median: issue 17
HEAVY = ("openai", "httpx", "pydantic", "jinja2", "jsonschema", "yaml", "croniter")

# Runs the CLI in-process, then reports which heavy modules that loaded, on its last line.
PROBE = f"""
import json, sys
from claw_batch.cli import main
try:
    main(sys.argv[1:], prog_name="claw")
except SystemExit:
    pass
loaded = [m for m in {HEAVY!r} if m in sys.modules]
print("\\n" + json.dumps(loaded))
"""


def run_once(argv: Sequence[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()}")
    return elapsed


def measure(commands: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    for argv in commands.values():  # warm the bytecode caches and the page cache
        run_once(argv)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            times[name].append(run_once(argv))
    return times


def timing_table(times: dict[str, list[float]]) -> str:
    base = median(times["python -c pass"])
    rows = [
        (
            f"`{name}`",
            len(values),
            ms(min(values)),
            ms(median(values)),
            ms(p90(values)),
            f"{median(values) / base:.1f}×",
            ms(median(values) - base),
        )
        for name, values in times.items()
    ]
    header = ("command", "runs", "min ms", "median ms", "p90 ms", "× python", "+ ms")
    return table(header, rows)


def first_requests(runs: int, *, ran_before: bool) -> list[float]:
    """Seconds from spawning `claw run -q` (one job) to its request reaching the server.
    `ran_before`: in a project that has run (its `.claw/` and config cache exist, as for every
    run after a project's first: cron, hooks, watch), forced with -B; otherwise each run in a
    new project, which validates its clawfile."""
    from fullrun import fan_out_project  # imports the test fakes: only for this row

    firsts = []
    with scratch() as tmp, LeanServer("done") as srv:
        project = fan_out_project(Path(tmp) / "ran", 1)
        if ran_before:
            for _ in range(2):  # the first makes .claw/ and keeps the config cache in it
                spawn(["run", "-q", "-B"], project, srv.env())
        for n in range(runs + 1):  # the first compiles bytecode and warms the page cache
            if not ran_before:
                project = fan_out_project(Path(tmp) / f"p{n}", 1)
            srv.stats()  # counts anew from here
            run = spawn(["run", "-q", "-B"], project, srv.env())
            arrived = srv.stats().arrived
            if len(arrived) != 1:
                sys.exit(f"claw run made {len(arrived)} requests, expected one")
            if n:
                firsts.append(arrived[0] - run.started)
    return firsts


def goal_lines(times: dict[str, list[float]], firsts: list[float]) -> str:
    lines = []
    for what, values, goal in (
        ("`claw list`, whole process", times["claw list"], LIST_GOAL),
        (
            "a run that calls a model, spawn → first request (a project that ran before)",
            firsts,
            FIRST_REQUEST_GOAL,
        ),
    ):
        met = "yes" if median(values) <= goal else "**no**"
        lines.append(
            f"- {what}: median **{median(values):.3f} s** (min {min(values):.3f}); goal ≤ "
            f"{goal:.2f} s; met: {met}"
        )
    return "\n".join(lines)


def heavy_imports(args: Sequence[str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=REPO, capture_output=True, text=True
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def import_check() -> tuple[str, bool]:
    rows, ok = [], True
    for args in (["--version"], ["list"], ["validate"]):
        loaded = heavy_imports(args)
        imports = MUST_NOT_IMPORT in loaded
        ok = ok and not imports
        shown = ", ".join(m for m in loaded if m != MUST_NOT_IMPORT) or "none of them"
        rows.append((f"`claw {' '.join(args)}`", "**yes**" if imports else "no", shown))
    header = ("command", f"imports {MUST_NOT_IMPORT}", f"loads (of {', '.join(HEAVY[1:])})")
    return table(header, rows), ok


@dataclass(frozen=True)
class Import:
    module: str
    depth: int  # 0: imported by claw's own code at run time or by the interpreter
    self_us: int
    cumulative_us: int


def import_times(args: Sequence[str]) -> list[Import]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *CLAW[1:], *args],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    found = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        found.append(Import(name.strip(), depth, int(self_us), int(cumulative_us)))
    return found


def import_table(imports: list[Import], top: int = 10) -> str:
    slowest = sorted(imports, key=lambda i: i.cumulative_us, reverse=True)[:top]
    rows = [
        (f"`{i.module}`", i.depth, ms(i.cumulative_us / 1e6), ms(i.self_us / 1e6)) for i in slowest
    ]
    return table(("module", "depth", "cumulative ms", "self ms"), rows)


def package_table(imports: list[Import], top: int = 8) -> str:
    """Self times summed by top-level package: what each dependency costs, without overlap."""
    cost: dict[str, int] = {}
    for i in imports:
        package = i.module.split(".")[0]
        cost[package] = cost.get(package, 0) + i.self_us
    slowest = sorted(cost.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return table(
        ("package", "self ms, all its modules"), [(f"`{p}`", ms(us / 1e6)) for p, us in slowest]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs

    print(f"machine: {machine()}")
    print(f"project: {REPO / 'clawfile.yaml'}\n")
    times = measure(COMMANDS, runs)
    name, argv = REFERENCE
    times.update(measure({name: argv}, min(runs, REFERENCE_RUNS)))
    firsts = first_requests(runs, ran_before=True)
    times["claw run: spawn → first request (1 job, a project that ran before)"] = firsts
    times["the same, a project's first run (validates the clawfile)"] = first_requests(
        runs, ran_before=False
    )
    print(timing_table(times), end="\n\n")
    print(goal_lines(times, firsts), end="\n\n")

    check, ok = import_check()
    print(check, end="\n\n")

    imports = import_times(["list"])
    total = sum(i.cumulative_us for i in imports if i.depth == 0)
    print(f"`claw list` under -X importtime: {len(imports)} modules, {ms(total / 1e6)} ms ", end="")
    print("(importtime's own overhead included); the 10 slowest by cumulative time:\n")
    print(import_table(imports), end="\n\n")
    print(package_table(imports))
    if not ok:
        print(f"\nFAIL: a command that calls no model imported {MUST_NOT_IMPORT}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 20's bench: a fan-out of 2,000 one-turn jobs against the fake endpoint, run here
(`claw run -j J`) and on a two-node Ray cluster on this machine (`claw run -j J --executor ray`),
each as a real `claw` child process timed from spawn to exit, and what Ray adds per job.

The endpoint is bench/leanfake.py in a process of its own (one final answer a request, after
--latency seconds). The cluster is the tests' (tests/cluster/raycluster.py): a head and a
second node on 127.0.0.1, four Ray CPUs each, so eight jobs in flight (a job takes one Ray
CPU); the provider's key is in the nodes' environment only. Both runs get the same project: a
fan-out over --jobs inbox files, each job answering in one turn.

Per job, Ray adds (the table's last rows):
- in the job's own time: its mean duration on the cluster (ledger duration_s: shipping, the
  scratch copy on the worker, the tool loop, the changes back and applied) less its mean here;
- in the whole run: (cluster wall − local wall) ÷ jobs.

    python bench/ray.py [--jobs 2000] [-j 8] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _common import REPO, machine, scratch, table, use_repo

use_repo()
sys.path.insert(0, str(REPO / "tests" / "cluster"))

from fullrun import CLAW, fan_out_project  # noqa: E402
from leanfake import LeanServer  # noqa: E402
from raycluster import WORKER_ENV, start_cluster  # noqa: E402

# This file is bench/ray.py: with its folder on the path, `import ray` would find it.
sys.path.remove(str(Path(__file__).resolve().parent))

KEY_ENV, KEY = next(iter(WORKER_ENV.items()))
CLAWFILE = """\
version: 1
model: lean/fake-model
providers:
  lean: {{base_url: "{url}", api_key_env: {key}}}
tasks:
  summarise:
    foreach: "inbox/*.txt"
    prompt: "Summarise {{{{ item.path }}}} in one line."
    output: "out/{{{{ item.stem }}}}.md"
"""


@dataclass(frozen=True)
class Measured:
    where: str
    wall: float  # s, spawn to exit
    cpu: float  # s, the claw process and what it reaped (not the cluster's processes)
    jobs: int
    job_mean: float  # s, the jobs' mean duration_s
    nodes: int  # distinct nodes the jobs ran on (0: here)


def run(root: Path, args: list[str], env: dict[str, str], where: str) -> Measured:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        [CLAW, "run", "--json", *args], cwd=root, env=env, capture_output=True, text=True
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{where}: claw run exited {done.returncode}:\n{done.stderr[-3000:]}")
    jobs = json.loads(done.stdout)["jobs"]
    if {j["status"] for j in jobs} != {"ok"}:
        sys.exit(f"{where}: not every job ran ok")
    with sqlite3.connect(root / ".claw/state.db") as db:
        nodes = {row[0] for row in db.execute("SELECT DISTINCT node FROM jobs")}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    mean = statistics.fmean(j["duration_s"] for j in jobs)
    return Measured(where, wall, cpu, len(jobs), mean, len(nodes - {None}))


def project(root: Path, jobs: int, url: str) -> Path:
    fan_out_project(root, jobs)
    (root / "clawfile.yaml").write_text(CLAWFILE.format(url=url, key=KEY_ENV))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("-j", type=int, default=8, help="jobs in flight, here and on the cluster")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds a model turn takes")
    args = parser.parse_args()
    env = {**os.environ, KEY_ENV: KEY, "NO_PROXY": "127.0.0.1"}
    env.pop("OPENAI_API_KEY", None)
    with LeanServer("done", latency=args.latency) as server:
        with scratch() as here:
            local = run(
                project(Path(here), args.jobs, server.base_url), ["-j", str(args.j)], env, "here"
            )
        cluster = start_cluster()
        try:
            with scratch() as there:
                root = project(Path(there), args.jobs, server.base_url)
                remote_args = ["-j", str(args.j), "--executor", "ray", "--address", cluster.address]
                remote = run(root, remote_args, {**env, KEY_ENV: ""}, "on the cluster")
        finally:
            cluster.close()
    rows = []
    for m in (local, remote):
        where = m.where if not m.nodes else f"{m.where} ({m.nodes} nodes)"
        rows.append(
            (
                where,
                f"{m.jobs:,}",
                f"{m.wall:.1f} s",
                f"{m.jobs / m.wall:.1f}",
                f"{m.job_mean * 1000:.0f} ms",
                f"{m.cpu:.1f} s",
            )
        )
    turn = f"{args.latency * 1000:.0f} ms a turn"
    print(f"{args.jobs:,} one-turn jobs, -j {args.j}, {turn}; {machine()}")
    print()
    print(table(("where", "jobs", "whole run", "jobs/s", "a job's mean time", "claw's CPU"), rows))
    print()
    per_job = (remote.job_mean - local.job_mean) * 1000
    per_run = (remote.wall - local.wall) / args.jobs * 1000
    print(
        table(
            ("Ray adds, per job", "figure", "goal"),
            [
                (
                    "to the job's own time (cluster mean − local mean)",
                    f"{per_job:.0f} ms",
                    "none set",
                ),
                (
                    "to the whole run ((cluster wall − local wall) ÷ jobs)",
                    f"{per_run:.1f} ms",
                    "none set",
                ),
            ],
        )
    )


if __name__ == "__main__":
    main()

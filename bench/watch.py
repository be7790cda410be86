"""`claw watch`: how long a dropped file waits for its job, and a burst of files.

A project with one watch task (`watch: ["inbox/*.txt"]`, `done: inbox/done`, output
`out/{{ item.stem }}.md`, no tools) and tests/fake_openai.FakeOpenAI (in this process, zero
latency) answering each job's one request. `claw watch --settle S -j J` runs as a real child
process (the console script); its progress lines on stderr are read by a thread of this
script and stamped as they arrive.

1. Latency, --drops files one at a time: each is written in place (open, write, close: the
   close is its last write), and the next one is dropped once the previous one's job is
   done, after a pause of 0-0.3 s. Measured per file: from the last write to the job's
   `start` line (what issue 4 judges: p95 ≤ settle + 0.5 s), and to its request reaching
   the model.
2. A burst of --burst files, each written under a temporary name and renamed into place as
   fast as this script can: the wall time from the first drop until the last file is in
   `inbox/done`, and whether each file was processed exactly once (one request per content,
   one output per file).

    python bench/watch.py [--drops 100] [--burst 500] [--settle 1.0] [-j 8]

Exits 1 when a file is processed twice or not at all.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import machine, median, ms, scratch, table, use_repo

use_repo()

from fake_openai import FakeOpenAI, Reply, text  # noqa: E402
from fullrun import CLAW, fake_env, load, revision  # noqa: E402

CLAWFILE = """\
version: 1
model: fake-model
tasks:
  triage:
    prompt: "Triage this message: {{ read(item.path) }}"
    watch: ["inbox/*.txt"]
    output: "out/{{ item.stem }}.md"
    done: inbox/done
    tools: []
"""
MARGIN = 0.5  # issue 4: p95 latency ≤ settle + 0.5 s


class Watching:
    """A `claw watch` child; `lines` holds (perf_counter, line) for each stderr line."""

    def __init__(self, root: Path, env: dict[str, str], settle: float, jobs: int) -> None:
        self.lines: list[tuple[float, str]] = []
        self.child = subprocess.Popen(
            [CLAW, "watch", "--settle", str(settle), "-j", str(jobs)],
            cwd=root,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        wait_until(lambda: any("claw watch: triage" in line for _, line in self.lines), 30)

    def _read(self) -> None:
        assert self.child.stderr is not None
        for line in self.child.stderr:
            self.lines.append((time.perf_counter(), line.rstrip("\n")))

    def started(self, rel: str) -> float | None:
        mark = f"start triage[{rel}]"
        return next((at for at, line in self.lines if line == mark), None)

    def stop(self) -> int:
        self.child.terminate()
        code = self.child.wait(timeout=30)
        self.reader.join(timeout=5)
        return code


def wait_until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            sys.exit("timed out waiting for claw watch")
        time.sleep(0.005)


class Seen:
    """The fake model's handler: stamps each request by the message it carries."""

    def __init__(self) -> None:
        self.at: dict[str, list[float]] = {}

    def __call__(self, body: dict[str, Any]) -> Reply:
        message = body["messages"][-1]["content"].split("message ", 1)[1].split("\n", 1)[0]
        self.at.setdefault(message, []).append(time.perf_counter())
        return text(f"ticket for message {message}")


def project(root: Path) -> Path:
    (root / "inbox").mkdir(parents=True)
    (root / "clawfile.yaml").write_text(CLAWFILE)
    return root


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def latency(drops: int, settle: float, jobs: int) -> tuple[list[float], list[float]]:
    seen = Seen()
    with FakeOpenAI() as srv, scratch() as tmp:
        srv.handler = seen
        root = project(Path(tmp) / "p")
        watching = Watching(root, fake_env(srv), settle, jobs)
        to_start, to_request = [], []
        rng = random.Random(4)
        try:
            for n in range(drops):
                rel = f"inbox/{n:04d}.txt"
                with open(root / rel, "w") as f:
                    f.write(f"message {n}\nthe printer is on fire\n")
                written = time.perf_counter()
                moved = root / "inbox" / "done" / f"{n:04d}.txt"
                wait_until(moved.exists, 30)
                start = watching.started(rel)
                assert start is not None, rel
                to_start.append(start - written)
                to_request.append(seen.at[str(n)][0] - written)
                time.sleep(rng.uniform(0, 0.3))
        finally:
            watching.stop()
        once(seen, drops)
    return to_start, to_request


def burst(files: int, settle: float, jobs: int) -> tuple[float, float, int, int]:
    """Wall time from the first drop to the last file in done/; the time of the drops alone;
    the number of requests and of outputs."""
    seen = Seen()
    with FakeOpenAI() as srv, scratch() as tmp:
        srv.handler = seen
        root = project(Path(tmp) / "p")
        watching = Watching(root, fake_env(srv), settle, jobs)
        done = root / "inbox" / "done"
        try:
            first = time.perf_counter()
            for n in range(files):
                part = root / "inbox" / f"{n:04d}.txt.part"
                part.write_text(f"message {n}\nthe printer is on fire\n")
                os.replace(part, part.with_suffix(""))
            dropped = time.perf_counter() - first
            wait_until(lambda: done.exists() and len(os.listdir(done)) == files, 120)
            wall = time.perf_counter() - first
        finally:
            watching.stop()
        once(seen, files)
        outputs = len(os.listdir(root / "out"))
    return wall, dropped, sum(len(at) for at in seen.at.values()), outputs


def once(seen: Seen, files: int) -> None:
    twice = sorted(m for m, at in seen.at.items() if len(at) > 1)
    missing = files - len(seen.at)
    if twice or missing:
        sys.exit(f"processed twice: {twice[:10]}; not processed: {missing}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drops", type=int, default=100)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("-j", "--jobs", type=int, default=8)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"machine: {machine()}; claw_batch at {revision()}; {load()}\n")

    to_start, to_request = latency(args.drops, args.settle, args.jobs)
    target = args.settle + MARGIN
    print(
        f"latency over {args.drops} drops, one at a time, `claw watch --settle {args.settle:g} "
        f"-j {args.jobs}`:\n"
    )
    rows = []
    for what, values in (
        ("last write → job `start` line", to_start),
        ("last write → request at the model", to_request),
    ):
        rows.append([what, ms(min(values)), ms(median(values)), ms(p95(values)), ms(max(values))])
    print(table(["from", "min ms", "p50 ms", "p95 ms", "max ms"], rows), end="\n\n")
    verdict = "meets it" if p95(to_start) <= target else "**misses it**"
    print(
        f"target: p95 to the job's start ≤ settle + {MARGIN:g} s = {target:g} s: {verdict} "
        f"(p95 {p95(to_start):.3f} s; {ms(p95(to_start) - args.settle)} ms over the settle "
        "time)\n"
    )

    wall, dropped, requests, outputs = burst(args.burst, args.settle, args.jobs)
    print(f"a burst of {args.burst} files (temporary name, then rename), `-j {args.jobs}`:\n")
    print(
        table(
            ["files", "dropped in s", "all done s", "files/s", "requests", "outputs"],
            [
                [
                    args.burst,
                    f"{dropped:.2f}",
                    f"{wall:.2f}",
                    f"{args.burst / wall:.0f}",
                    requests,
                    outputs,
                ]
            ],
        ),
        end="\n\n",
    )
    print(f"each file processed exactly once: yes ({requests} requests, {args.burst} contents)")
    print(f"\nthe script took {time.perf_counter() - started:.0f} s; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What watching an untainted job's command costs per bash call (claw_batch.taint.watch).

The bash tool runs `true` through `JobTaint.run`, as a job's loop calls it, in a project
with no outside content (nothing is watched: the baseline), then with some: tainted files
in out/ (the ledger's rows) and dropped files in inbox/ (a watch folder). A job that writes
only reports/ has its folders watched; one that writes out/** could rename the tainted files,
so each of them is watched by itself; a large ledger shows how that grows. Each row runs
sandboxed (the runner's own mode: as root, nobody in the id-mapped mount) and unsandboxed
(`sandbox: none`, where the watch's share shows best). The difference of the medians to the
first row is the watch's cost. A slice follows: the watch's own steps without a command
(listing the outside content, the walk of the write directories, setting and reading the
inotify watches).

    python bench/taintwatch.py [--calls 50]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path

from _common import machine, median, ms, p90, table, use_repo

use_repo()

from claw_batch.safety.childenv import scrubbed_env  # noqa: E402
from claw_batch.safety.paths import Policy  # noqa: E402
from claw_batch.sandbox import bubblewrap as sandbox  # noqa: E402
from claw_batch.store.filehash import FileHashes  # noqa: E402
from claw_batch.taint.jobtaint import JobTaint  # noqa: E402
from claw_batch.taint.ledger import TaintedFiles, Writer  # noqa: E402
from claw_batch.taint.outside import outside_now  # noqa: E402
from claw_batch.taint.watch import Watch, walk  # noqa: E402
from claw_batch.tools.base import ToolContext  # noqa: E402
from claw_batch.tools.registry import TOOLS  # noqa: E402

WRITER = Writer("bench", "", "run")


def project(root: Path, tainted: int, dropped: int) -> TaintedFiles:
    """A project with `tainted` files a tainted job wrote and `dropped` in the watch folder."""
    for rel in ("out", "inbox", "reports"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    untrusted = ("inbox/*.txt", "inbox/**") if dropped else ()
    files = TaintedFiles(None, untrusted, FileHashes(None, root).hash)
    for n in range(tainted):
        data = f"As ordered: note {n}\n".encode()
        (root / f"out/{n:05}.md").write_bytes(data)
        files.mark(f"out/{n:05}.md", hashlib.sha256(data).hexdigest(), "inbox/x.txt", WRITER)
    for n in range(dropped):
        (root / f"inbox/{n:05}.txt").write_text("Hello\n")
    return files


def timed(root: Path, files: TaintedFiles, write: str, boxed: bool, calls: int) -> list[float]:
    policy = Policy(root, write_globs=(write,))
    box = sandbox.for_job(policy, network=False) if boxed else None
    dirs = sandbox.write_dirs(policy.write_globs, ()) if boxed else ("",)
    taint = JobTaint(files=files, writer=WRITER, tools=("bash",), bash_dirs=dirs)
    ctx = ToolContext(root, policy, scrubbed_env(), time.monotonic() + 3600, True, box, taint=taint)
    arguments = json.dumps({"command": "true"})
    times = []
    for _ in range(calls + 1):  # the first call warms the hash cache: not counted
        started = time.perf_counter()
        out = taint.run("bash", str(root), lambda: TOOLS["bash"].invoke(ctx, arguments))
        times.append(time.perf_counter() - started)
        assert out == "exit code 0\n(no output)", out
    return times[1:]


def steps(root: Path, files: TaintedFiles, write: str, calls: int) -> list[list[float]]:
    """The watch's own steps, without a command: outside_now, walk, Watch start + stop."""
    dirs = sandbox.write_dirs((write,), ())
    times: list[list[float]] = [[], [], []]
    for _ in range(calls):
        started = time.perf_counter()
        outside = outside_now(str(root), files, dirs)
        listed = time.perf_counter()
        walk(str(root), dirs)
        walked = time.perf_counter()
        assert outside is not None
        watch = Watch(str(root), outside)
        watch.start()
        watch.stop()
        done = time.perf_counter()
        times[0].append(listed - started)
        times[1].append(walked - listed)
        times[2].append(done - walked)
    return times


CASES = (  # what the project holds, what the job writes
    ("nothing outside", 0, 0, "reports/**"),
    ("20 tainted, 20 dropped", 20, 20, "reports/**"),
    ("20 tainted, 20 dropped", 20, 20, "out/**"),
    ("1000 tainted, 1000 dropped", 1000, 1000, "reports/**"),
    ("1000 tainted, 1000 dropped", 1000, 1000, "out/**"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    calls = parser.parse_args().calls
    rows, parts = [], []
    for what, tainted, dropped, write in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp).resolve()
            files = project(root, tainted, dropped)
            for boxed in (True, False):
                times = timed(root, files, write, boxed, calls)
                how = "sandboxed" if boxed else "none"
                rows.append([what, write, how, ms(median(times)), ms(p90(times))])
            if tainted:
                step = [ms(median(t), 2) for t in steps(root, files, write, calls)]
                parts.append([what, write, *step])
    print(machine())
    print(f"{calls} calls each of `true`\n")
    print(table(["project", "job writes", "sandbox", "median ms", "p90 ms"], rows))
    print("\nslice: the watch's own steps per call, median ms (no command run)\n")
    print(table(["project", "job writes", "outside_now", "walk", "watch start+stop"], parts))


if __name__ == "__main__":
    main()

"""`claw watch`: how long it takes to exit after SIGTERM (issue 16, point 13: < 0.5 s).

A real `claw watch` child process (the console script) on a project of watch tasks, with
tests/fake_openai.FakeOpenAI in this process. Each case starts it, waits for its first line
on stderr (and then `--wait` seconds, or what the case does), sends SIGTERM and times the
wait for its exit. `--load N` keeps N busy-looping processes running meanwhile (the cores
shared with other work, where the slow stop was reported).

    python bench/watch_stop.py [--runs 8] [--load 4] [--claw PATH]

--claw times another claw executable (an older checkout's, say) on the same cases.

The cases: idle (3 s after the first line, so openai is imported); the same with 40 watch
tasks of 20 subdirectories each (840 inotify watches); a file settling (--settle 10); a job
in a model call that hangs (exit 130); SIGTERM as soon as the first line is out.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from _common import machine, median, table, use_repo

use_repo()

from fake_openai import FakeOpenAI, hang, text  # noqa: E402
from fullrun import CLAW, fake_env, revision  # noqa: E402

GOAL = 0.5  # seconds from SIGTERM to exit
claw = CLAW

TASK = """\
  t{i}:
    prompt: "Triage {{{{ read(item.path) }}}}"
    watch: ["in{i}/**/*.txt"]
    output: "out/{i}-{{{{ item.stem }}}}.md"
    done: done{i}
    tools: []
"""


def project(parent: str, tasks: int = 1, subdirs: int = 0) -> Path:
    root = Path(tempfile.mkdtemp(dir=parent))
    for i in range(tasks):
        for s in range(subdirs):
            (root / f"in{i}" / f"d{s}").mkdir(parents=True)
        (root / f"in{i}").mkdir(exist_ok=True)
    clawfile = "".join(TASK.format(i=i) for i in range(tasks))
    (root / "clawfile.yaml").write_text("version: 1\nmodel: fake-model\ntasks:\n" + clawfile)
    return root


def drop(root: Path) -> None:
    (root / "in0" / f"{time.monotonic_ns()}.txt").write_text("the printer is on fire\n")


def stop_time(
    root: Path, srv: FakeOpenAI, wait: float, then: Callable[[Path], None], *args: str
) -> tuple[float, int]:
    """Seconds from SIGTERM to exit, and the exit code."""
    child = subprocess.Popen(
        [claw, "watch", *args], cwd=root, env=fake_env(srv), stderr=subprocess.PIPE, text=True
    )
    assert child.stderr is not None
    child.stderr.readline()
    drain = threading.Thread(target=child.stderr.read, daemon=True)
    drain.start()
    then(root)
    time.sleep(wait)
    sent = time.perf_counter()
    child.send_signal(signal.SIGTERM)
    code = child.wait(timeout=60)
    return time.perf_counter() - sent, code


def cases(srv: FakeOpenAI, parent: str, wait: float) -> dict[str, Callable[[], tuple]]:
    one, many = project(parent), project(parent, tasks=40, subdirs=20)

    def hung(root: Path) -> None:
        srv.enqueue(hang(60))
        drop(root)

    def idle(root: Path) -> None:
        pass

    return {
        f"idle, {wait:g} s after the first line": lambda: stop_time(one, srv, wait, idle),
        f"40 tasks x 20 subdirectories, idle {wait:g} s": lambda: stop_time(many, srv, wait, idle),
        "a file settling (--settle 10)": lambda: stop_time(one, srv, 0.5, drop, "--settle", "10"),
        "a job in a hung model call (exit 130)": lambda: stop_time(
            one, srv, 1.5, hung, "--settle", "0.1"
        ),
        "as soon as the first line is out": lambda: stop_time(one, srv, 0, idle),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--load", type=int, default=0, help="busy processes meanwhile")
    parser.add_argument("--wait", type=float, default=3.0, help="idle seconds before SIGTERM")
    parser.add_argument("--claw", default=CLAW, help="the claw executable to time")
    args = parser.parse_args()
    global claw
    claw = args.claw
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    rows = []
    try:
        with FakeOpenAI() as srv, tempfile.TemporaryDirectory() as parent:
            srv.handler = lambda body: text("ok")
            for name, case in cases(srv, parent, args.wait).items():
                runs = [case() for _ in range(args.runs)]
                times = [t for t, _ in runs]
                met = "yes" if max(times) < GOAL else "no"
                codes = ", ".join(str(c) for c in sorted({c for _, c in runs}))
                row = [f"{min(times):.3f}", f"{median(times):.3f}", f"{max(times):.3f}"]
                rows.append([name, *row, codes, met])
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"{machine()}\n{revision()}, {claw}, {args.runs} runs a case, {args.load} busy\n")
    print(table(["case", "min s", "p50 s", "max s", "exit", f"max < {GOAL} s"], rows))


if __name__ == "__main__":
    main()

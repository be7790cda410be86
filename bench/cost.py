"""What the example fan-out costs (issue 18): requests and dollars for a clean run, for a run
killed at half its requests and run again, and for a batch run — with claw as it is and with
its call cache off — and the saving as a ratio.

The project is the example's `triage` task (this repository's clawfile, prompts, skills and
workspace) over --items inbox messages (copies of the three in workspace/inbox/, numbered).
Each scenario starts from a fresh copy and runs the real `claw run -q -j 16 triage` in a child
process against the test suite's fake OpenAI server, which answers as
scripts/record_example.py's script does (a `read` of the message, then the ticket; 700 + 20
then 850 + 90 tokens). Requests are counted where they arrive, at the server; dollars are
those requests' tokens at the example model's built-in price (gpt-4o-mini) — a killed run
prints no total, and a provider bills a request it answered whether or not claw lived to read
the answer.

- clean: one run, every job ran.
- killed at 50 %: the server kills the run's process group (SIGKILL) when the request half-way
  through the clean run's count arrives; then `claw run` again, to the end. The figure is
  both runs together: what the work cost with a crash in the middle.
- output moved: after a clean run, the task's `output:` path changes (a setting that acts
  after the model) and `claw run` again: every job reruns; the figure is the second run.
- batch: `claw run --batch`: the same requests through the fake's Files and Batches API,
  priced at the batch price (half of list for gpt-4o-mini).

"cache off" is `claw run --no-cache`: the same work with the call cache off, each row's
baseline. With -j 16, a kill at 50 % leaves at most 16 jobs half done: the completed ones are
up to date without any cache (make semantics), so the cache saves only the first turns of the
jobs in flight there; a kill inside long multi-turn jobs saves more (tests/run/test_callcache.py:
a job killed after 5 of 8 turns costs 3 requests).

    python bench/cost.py [--items 1000]

Exits 0 whatever the figures (a benchmark reports), 1 when a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import REPO, example_project, machine, scratch, table, use_repo

use_repo()
sys.path.insert(0, str(REPO / "scripts"))

from fake_openai import FakeOpenAI, Reply, call, text, tool_calls  # noqa: E402
from record_example import TICKETS  # noqa: E402

from claw_batch.llm import prices  # noqa: E402
from claw_batch.llm.usage import Usage  # noqa: E402

MODEL = "gpt-4o-mini"  # the example clawfile's
TURNS = (Usage(700, 20), Usage(850, 90))  # what the fake says each turn of a job used
JOBS = 16
CACHE_OFF = ("--no-cache",)
BATCH = ("--batch",)
OUTPUT = "workspace/tickets/{{ item.stem }}.json"  # the example's triage output, and moved:
MOVED = "workspace/tickets-v2/{{ item.stem }}.json"


def reply(body: dict[str, Any]) -> Reply:
    """The example's triage script, for any numbered copy of its messages."""
    user = body["messages"][1]["content"]
    path = next(w.strip("`.") for w in user.split() if w.startswith("`workspace/inbox/"))
    if not any(m["role"] == "assistant" for m in body["messages"]):
        turn = TURNS[0]
        return tool_calls(call("read", {"path": path}), usage=_pair(turn))
    stem = Path(path).stem.split(".", 1)[0]  # acme-invoice.0042 -> acme-invoice
    return text(json.dumps(TICKETS[stem]), usage=_pair(TURNS[1]))


def _pair(usage: Usage) -> tuple[int, int]:
    return usage.prompt_tokens, usage.completion_tokens


def example(root: Path, items: int) -> Path:
    """The example project with `items` messages in its inbox."""
    example_project(root)
    inbox = root / "workspace/inbox"
    messages = [(path.stem, path.read_bytes()) for path in sorted(inbox.glob("*.txt"))]
    for path in inbox.glob("*.txt"):
        path.unlink()
    for n in range(items):
        stem, content = messages[n % len(messages)]
        (inbox / f"{stem}.{n:05d}.txt").write_bytes(content)
    return root


@dataclass
class Spent:
    requests: int = 0
    usd: float = 0.0

    def add(self, body: dict[str, Any], *, batch: bool = False) -> None:
        turn = TURNS[0] if len(body["messages"]) <= 2 else TURNS[1]
        self.requests += 1
        self.usd += prices.cost(turn, prices.lookup(MODEL, batch=batch)) or 0.0


class Counting:
    """The fake server's handler: counts what it receives; kills the run at request `kill_at`."""

    def __init__(self, kill_at: int | None = None, *, batch: bool = False) -> None:
        self.spent = Spent()
        self.kill_at = kill_at
        self.batch = batch  # the requests come as a batch's lines: the batch price
        self.child: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.spent.add(body, batch=self.batch)
            if self.child is not None and self.spent.requests == self.kill_at:
                os.killpg(self.child.pid, signal.SIGKILL)  # the run and its workers
        return reply(body)


def claw_run(
    root: Path, server: FakeOpenAI, handler: Counting, *args: str, killed: bool = False
) -> None:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-bench-not-a-real-key",
        "CLAW_NOW": "2026-11-23T07:30:00+01:00",
    }
    command = [sys.executable, "-m", "claw_batch", "run", "-q", "-j", str(JOBS), *args, "triage"]
    child = subprocess.Popen(
        command,
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    handler.child = child
    _, err = child.communicate()
    handler.child = None
    if killed and child.returncode == -signal.SIGKILL:
        return
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {child.returncode}:\n{err.decode()}")


def clean(items: int, args: tuple[str, ...]) -> Spent:
    with scratch() as tmp, FakeOpenAI() as server:
        server.handler = handler = Counting(batch="--batch" in args)
        claw_run(example(Path(tmp) / "p", items), server, handler, *args)
    return handler.spent


def killed(items: int, args: tuple[str, ...], half: int) -> Spent:
    with scratch() as tmp, FakeOpenAI() as server:
        root = example(Path(tmp) / "p", items)
        server.handler = handler = Counting(kill_at=half)
        claw_run(root, server, handler, *args, killed=True)
        handler.kill_at = None
        claw_run(root, server, handler, *args)  # to the end
    return handler.spent


def moved(items: int, args: tuple[str, ...]) -> Spent:
    """What a second run costs after the output path changed: every job runs again."""
    with scratch() as tmp, FakeOpenAI() as server:
        root = example(Path(tmp) / "p", items)
        server.handler = handler = Counting()
        claw_run(root, server, handler, *args)
        clawfile = root / "clawfile.yaml"
        text_ = clawfile.read_text(encoding="utf-8")
        assert OUTPUT in text_, "the example's triage output changed: update OUTPUT"
        clawfile.write_text(text_.replace(OUTPUT, MOVED), encoding="utf-8")
        server.handler = handler = Counting()
        claw_run(root, server, handler, *args)
    return handler.spent


def shown(spent: Spent) -> str:
    return f"{spent.requests:,} requests, ${spent.usd:.4f}"


def ratio(off: Spent, now: Spent) -> str:
    if not now.usd:
        return "∞ (nothing paid)" if off.usd else "—"
    return f"{off.usd / now.usd:.2f}×"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    options = parser.parse_args()
    print(f"machine: {machine()}; {options.items:,} jobs of the example's triage, -j {JOBS}\n")
    n = options.items
    clean_now, clean_off = clean(n, ()), clean(n, CACHE_OFF)
    half = clean_now.requests // 2
    scenarios = (
        ("clean run", clean_off, clean_now),
        (
            "killed at 50 %, then run again (both runs)",
            killed(n, CACHE_OFF, half),
            killed(n, (), half),
        ),
        ("output path changed, run again (the second run)", moved(n, CACHE_OFF), moved(n, ())),
        ("batch run (`--batch`), against the clean live run", clean_off, clean(n, BATCH)),
    )
    rows = [
        [name, shown(off), f"**{shown(now)}**", ratio(off, now)] for name, off, now in scenarios
    ]
    header = ["scenario", "cache off (`--no-cache`)", "claw", "saving (dollars: cache off ÷ claw)"]
    print(table(header, rows))
    print(
        f"\nRequests counted at the fake server (a batch's lines included); dollars at {MODEL}'s "
        "built-in price (the batch price for the batch run)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

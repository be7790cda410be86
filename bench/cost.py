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
- batch: `claw run --batch` (issue 18, part 2), where this claw has it.

The call cache (issue 18, part 1) is what should make the killed run cost what the clean one
does. Until this claw has one, the "cache off" and "now" columns are the same work measured
twice, and the batch row says it cannot be measured; CACHE_OFF and BATCH below are the
switches to fill in as those parts land.

    python bench/cost.py [--items 1000]

Exits 0 whatever the figures (a benchmark reports), 1 when a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import REPO, machine, scratch, table, use_repo

use_repo()
sys.path.insert(0, str(REPO / "scripts"))

from fake_openai import FakeOpenAI, Reply, call, text, tool_calls  # noqa: E402
from record_example import TICKETS  # noqa: E402

from claw_batch.llm import prices  # noqa: E402
from claw_batch.llm.usage import Usage  # noqa: E402

MODEL = "gpt-4o-mini"  # the example clawfile's
TURNS = (Usage(700, 20), Usage(850, 90))  # what the fake says each turn of a job used
JOBS = 16
# Arguments of `claw run` that turn the call cache off (part 1), and that send a task's calls
# through the provider's Batch API (part 2); None: this claw has no such thing yet.
CACHE_OFF: tuple[str, ...] | None = None
BATCH: tuple[str, ...] | None = None


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
    root.mkdir(parents=True)
    for rel in ("clawfile.yaml", "prompts", "skills", "workspace"):
        source = REPO / rel
        if source.is_dir():
            shutil.copytree(source, root / rel, ignore=shutil.ignore_patterns("reports", "tickets"))
        else:
            shutil.copy(source, root / rel)
    for note in (root / "workspace/memory").glob("*.md"):
        note.unlink()
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

    def add(self, body: dict[str, Any]) -> None:
        turn = TURNS[0] if len(body["messages"]) <= 2 else TURNS[1]
        self.requests += 1
        self.usd += prices.cost(turn, prices.lookup(MODEL)) or 0.0


class Counting:
    """The fake server's handler: counts what it receives; kills the run at request `kill_at`."""

    def __init__(self, kill_at: int | None = None) -> None:
        self.spent = Spent()
        self.kill_at = kill_at
        self.child: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.spent.add(body)
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
        server.handler = handler = Counting()
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


def shown(spent: Spent | None) -> str:
    if spent is None:
        return "— (not in this claw)"
    return f"{spent.requests:,} requests, ${spent.usd:.4f}"


def ratio(off: Spent | None, now: Spent | None) -> str:
    if off is None or now is None or not now.usd:
        return "—"
    return f"{off.usd / now.usd:.2f}×"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    options = parser.parse_args()
    print(f"machine: {machine()}; {options.items:,} jobs of the example's triage, -j {JOBS}\n")
    off_args = CACHE_OFF if CACHE_OFF is not None else ()
    rows = []
    clean_now = clean(options.items, ())
    clean_off = clean(options.items, off_args)
    half = clean_now.requests // 2
    kill_now = killed(options.items, (), half)
    kill_off = killed(options.items, off_args, half)
    batch_now = clean(options.items, BATCH) if BATCH is not None else None
    batch_off = clean(options.items, (*off_args, *BATCH)) if BATCH is not None else None
    for name, off, now in (
        ("clean run", clean_off, clean_now),
        ("killed at 50 %, then run again (both runs)", kill_off, kill_now),
        ("batch run", batch_off, batch_now),
    ):
        rows.append([name, shown(off), f"**{shown(now)}**", ratio(off, now)])
    header = ["scenario", "cache off", "now", "saving (cache off ÷ now, dollars)"]
    print(table(header, rows))
    cache = (
        "the call cache is off in both columns: this claw has none"
        if CACHE_OFF is None
        else (f"cache off: `claw run {' '.join(CACHE_OFF)}`")
    )
    print(f"\nRequests counted at the fake server; dollars at {MODEL}'s built-in price; {cache}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

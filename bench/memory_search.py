"""memory_search over ~100 MB of daily notes (10,000 files), next to a pure-Python scan of the
same files for the same queries.

A workspace is generated in a temporary directory: MEMORY.md (~5 KB of keyed facts under
headings), 24 monthly archive files, and --days daily notes `memory/YYYY-MM-DD.md`, one a
day back from --today, ~10 KB each: the runner's entries (`### HH:MM task · ok · …` and
`> ` result lines) and hand-written sections (`## ` headings, paragraphs, bullets, `- key:`
facts, `#tags`) in words drawn from a Zipf distribution over a vocabulary of real words and
~20,000 made-up ones. A few words are planted: `kubernetes` in five notes years old (a rare
query that only old notes answer), and `zeppelin-quartz` nowhere (a query that must search
every file).

Each query goes through the tool (`TOOLS["memory_search"].invoke`, limit 8, as a model's call
does) --runs times; the pure-Python scan opens every note, splits its lines and keeps those
holding any of the query's words (lower-cased, as memory_search matches), --scan-runs times.
Both run on a warm page cache (every file is read once first). Also shown, for scale: one
python_ripgrep call over all the files for a word that is nowhere (the cost of a full scan).

    python bench/memory_search.py [--days 10000] [--runs 20] [--scan-runs 3]

Exits 1 if the p50 of memory_search over all queries misses the target (150 ms).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import machine, median, ms, table, use_repo

use_repo()

from fullrun import load, revision  # noqa: E402

TARGET = 0.150  # seconds: issue 5, p50 of memory_search
TODAY = dt.date(2026, 11, 22)
QUERIES = (
    ("billing-owner", "a key (MEMORY.md, and notes)"),
    ("#incident", "a tag"),
    ("deploy staging", "two common words"),
    ("Jonas", "a name"),
    ("retro", "a word of headings"),
    ("invoice overdue customer", "three words"),
    ("kubernetes", "rare: five notes, years old"),
    ("zeppelin-quartz", "nowhere: every file searched"),
)

_COMMON = """the a to of and in is for on it with that this was as be at by we not are from or
have an but they has had were will can all one there their what so up out if about who get
which go me when make like time no just him know take people into year your good some could
them see other than then now look only come its over think also back after use two how our
work first well way even new want because any these give day most us deploy release staging
invoice customer billing ticket review report build test fix bug merge branch server
database backup migration meeting plan schedule budget contract vendor payment refund order
shipment support email call team design draft feedback update status issue priority owner
deadline sprint retro incident alert outage latency cache queue worker job task cron script
config secret token key account user login password access policy audit compliance legal
summary note idea question answer decision risk metric dashboard chart query index log
monitor rollback hotfix patch version tag commit pipeline runner agent model prompt memory
skill tool file folder inbox archive share sync upload download link document spreadsheet
slide calendar holiday travel office remote hire onboarding training salary expense receipt
tax quarter month week morning evening friday monday thursday wednesday tuesday"""
COMMON = _COMMON.split()
NAMES = ["Ana", "Jonas", "Mia", "Theo", "Lena", "Omar", "Priya", "Chen", "Sofia", "Lukas"]
TAGS = ["billing", "ops", "incident", "release", "customer", "bug", "idea", "hiring", "legal"]
TASKS = ["triage", "nightly-summary", "review-staged", "inbox-digest", "invoice-check"]
KEYS = [
    "billing-owner",
    "release-train",
    "deploy-window",
    "vendor-acme",
    "oncall",
    "style",
    "backup-policy",
    "budget-q3",
    "office-wifi",
    "support-hours",
]


class Words:
    """Zipf-distributed words: the common ones first, then a long tail of made-up ones."""

    def __init__(self, rng: random.Random, tail: int = 20_000) -> None:
        syllables = ["ka", "lo", "mi", "ren", "tu", "vel", "sor", "an", "di", "pe", "qua", "zin"]
        made = {"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(tail)}
        self.vocabulary = COMMON + sorted(made - set(COMMON))
        weights = [1 / (rank + 1) for rank in range(len(self.vocabulary))]
        self.cumulative = list(_accumulate(weights))
        self.rng = rng

    def take(self, n: int) -> list[str]:
        return self.rng.choices(self.vocabulary, cum_weights=self.cumulative, k=n)

    def sentence(self, low: int = 6, high: int = 18) -> str:
        words = self.take(self.rng.randint(low, high))
        if self.rng.random() < 0.3:
            words.insert(self.rng.randrange(len(words)), self.rng.choice(NAMES))
        if self.rng.random() < 0.08:
            words.append("#" + self.rng.choice(TAGS))
        text = " ".join(words)
        return text[0].upper() + text[1:] + "."


def _accumulate(values: Sequence[float]) -> list[float]:
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


def daily_note(day: dt.date, words: Words, rng: random.Random, size: int) -> str:
    parts = [f"# {day.isoformat()}\n"]
    length = len(parts[0])
    minute = 6 * 60
    while length < size:
        minute = (minute + rng.randint(5, 50)) % (24 * 60)
        runner = rng.random() < 0.6  # most of a note is what the runner appends
        block = runner_entry(minute, words, rng) if runner else hand_section(words, rng)
        parts.append(block)
        length += len(block)
    return "\n".join(parts)


def runner_entry(minute: int, words: Words, rng: random.Random) -> str:
    status = "ok" if rng.random() < 0.9 else "failed"
    head = (
        f"### {minute // 60:02d}:{minute % 60:02d} {rng.choice(TASKS)} · {status} · "
        f"{rng.uniform(0.5, 40):.1f} s · {rng.randint(300, 9000):,} tokens"
    )
    lines = [f"> {words.sentence()}" for _ in range(rng.randint(1, 3))]
    return head + "\n" + "\n".join(lines) + "\n"


def hand_section(words: Words, rng: random.Random) -> str:
    title = " ".join(words.take(rng.randint(2, 4))).capitalize()
    if rng.random() < 0.3:
        title = f"Meeting with {rng.choice(NAMES)}: {title}"
    lines = [f"## {title}", ""]
    for _ in range(rng.randint(1, 3)):
        lines.append(" ".join(words.sentence() for _ in range(rng.randint(1, 3))))
        lines.append("")
    for _ in range(rng.randint(0, 4)):
        if rng.random() < 0.3:
            lines.append(f"- {rng.choice(KEYS)}: {words.sentence(3, 8)}")
        else:
            lines.append(f"- {words.sentence(4, 10)}")
    return "\n".join(lines) + "\n"


def make_workspace(root: Path, days: int, seed: int = 5) -> tuple[int, int]:
    """Writes the workspace under root/workspace; returns (files, bytes) of its notes."""
    rng = random.Random(seed)
    words = Words(rng)
    memory = root / "workspace" / "memory"
    (memory / "archive").mkdir(parents=True)
    facts = [f"- {key}: {words.sentence(4, 10)}" for key in KEYS]
    facts += [f"- {words.sentence(5, 12)}" for _ in range(40)]
    (root / "workspace" / "MEMORY.md").write_text(
        "# Memory\n\n## Project\n\n" + "\n".join(facts[:25]) + "\n\n## People\n\n"
        "- billing-owner: Jonas owns billing questions.\n" + "\n".join(facts[25:]) + "\n"
    )
    for back in range(24):
        month = (TODAY.replace(day=1) - dt.timedelta(days=31 * back)).strftime("%Y-%m")
        body = "\n".join(f"- {rng.choice(KEYS)}: {words.sentence(4, 10)}" for _ in range(30))
        (memory / "archive" / f"{month}.md").write_text(f"# Memory archive {month}\n\n{body}\n")
    planted = {3000, 4100, 5200, 6300, 7400}
    total = 0
    for back in range(days):
        day = TODAY - dt.timedelta(days=back)
        text = daily_note(day, words, rng, rng.randint(8_000, 12_000))
        if back in planted:
            text += "\n## Cluster\n\n> the kubernetes cluster was retired today\n"
        data = text.encode("utf-8")
        (memory / f"{day.isoformat()}.md").write_bytes(data)
        total += len(data)
    return days, total


def python_scan(notes: Sequence[Path], query: str) -> int:
    """The least a Python search does: open every note, keep the lines that hold a word."""
    wanted = [w.lower() for w in query.split()]
    found = 0
    for path in notes:
        with open(path, encoding="utf-8") as f:
            for line in f.read().split("\n"):
                lowered = line.lower()
                if any(w in lowered for w in wanted):
                    found += 1
    return found


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--scan-runs", type=int, default=3)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"machine: {machine()}; claw_batch at {revision()}; {load()}\n")

    import python_ripgrep

    from claw_batch.safety.paths import Policy
    from claw_batch.tools.base import ToolContext
    from claw_batch.tools.registry import TOOLS

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        files, size = make_workspace(root, args.days)
        made = time.perf_counter() - started
        notes = sorted((root / "workspace" / "memory").glob("*.md"))
        for path in notes:  # a warm page cache for both
            path.read_bytes()
        print(
            f"workspace: {files:,} daily notes, {size / 1e6:.1f} MB (+ MEMORY.md and 24 archive "
            f"files), generated in {made:.0f} s\n"
        )
        ctx = ToolContext(
            root=root, policy=Policy(root), env={}, deadline=time.monotonic() + 3600, today=TODAY
        )
        tool = TOOLS["memory_search"]
        rows, pooled, scans = [], [], []
        for query, what in QUERIES:
            arguments = json.dumps({"query": query})
            tool.invoke(ctx, arguments)  # warm-up
            times = timed(functools.partial(tool.invoke, ctx, arguments), args.runs)
            searched = _searched(root, query)
            scan = timed(functools.partial(python_scan, notes, query), args.scan_runs)
            pooled += times
            scans += scan
            rows.append(
                [
                    f"`{query}`",
                    what,
                    f"{searched:,}",
                    ms(median(times)),
                    ms(p95(times)),
                    ms(median(scan), 0),
                    f"{median(scan) / median(times):.0f}×",
                ]
            )
        rows.append(
            [
                "**all queries**",
                "",
                "",
                f"**{ms(median(pooled))}**",
                f"**{ms(p95(pooled))}**",
                ms(median(scans), 0),
                f"{median(scans) / median(pooled):.0f}×",
            ]
        )
        header = [
            "query",
            "what",
            "files searched",
            "memory_search p50 ms",
            "p95 ms",
            "Python scan p50 ms",
            "ratio",
        ]
        print(f"{args.runs} runs of memory_search and {args.scan_runs} of the scan per query:\n")
        print(table(header, rows), end="\n\n")
        paths = [str(p) for p in notes]
        full = timed(lambda: python_ripgrep.search(["(?i)zeppelin-quartz"], paths=paths), 5)
        print(
            f"for scale: one python_ripgrep call over all {len(paths):,} notes, no match: "
            f"p50 {ms(median(full))} ms\n"
        )
    verdict = "meets it" if median(pooled) <= TARGET else "**misses it**"
    print(f"target: memory_search p50 ≤ {TARGET * 1000:.0f} ms: {verdict}")
    print(f"\nthe script took {time.perf_counter() - started:.0f} s; {load()}")
    return 0 if median(pooled) <= TARGET else 1


def _searched(root: Path, query: str) -> int:
    from claw_batch.memory import search as recall

    return recall.search(root, "workspace", query, limit=8, today=TODAY).searched


if __name__ == "__main__":
    sys.exit(main())

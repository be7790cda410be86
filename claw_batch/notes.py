"""Daily notes: after each job the runner, not the model, appends one entry to
workspace/memory/YYYY-MM-DD.md."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from pathlib import Path

FIRST_LINES = 3
LINE_WIDTH = 160


def first_lines(text: str, n: int = FIRST_LINES) -> list[str]:
    """The first non-blank lines, shortened; a JSON result is shown on one line."""
    if text.lstrip().startswith(("{", "[")):
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text), ensure_ascii=False)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    shown = [ln if len(ln) <= LINE_WIDTH else ln[: LINE_WIDTH - 1] + "…" for ln in lines[:n]]
    if len(lines) > n:
        shown.append(f"… ({len(lines) - n} more lines)")
    return shown


def format_entry(
    *,
    when: dt.datetime,
    job: str,
    status: str,
    seconds: float,
    tokens: int,
    text: str,
    cost: float | None = None,
) -> str:
    head = f"### {when.strftime('%H:%M')} {job} · {status} · {seconds:.1f} s · {tokens:,} tokens"
    head += f" · ${cost:.4f}" if cost is not None else ""
    body = "\n".join(f"> {ln}" for ln in first_lines(text))
    return f"{head}\n{body}\n\n" if body else f"{head}\n\n"


def append(path: Path, entry: str) -> None:
    """Append with O_APPEND and fsync: concurrent writers never interleave inside an entry.
    A write that fails (a full disk) leaves the note as it was, no half entry, and raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            entry = f"# {path.stem}\n\n{entry}"
        view = memoryview(entry.encode("utf-8"))
        try:
            while view:  # a short write goes on where it stopped
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


SHOWN_ITEMS = 3  # results of a fan-out task quoted in its note
SHOWN_FAILURES = 5


NoteJob = tuple[str, str, float, int, str, "float | None"]


def format_task_entry(*, when: dt.datetime, task: str, jobs: list[NoteJob]) -> str:
    """One entry for all the jobs a task ran in this run: (item, status, seconds, tokens,
    result or error, cost in USD or None) each. A task without fan-out reads like a single
    job. The cost is shown when every job that used tokens has a known price."""
    from claw_batch.prices import total

    seconds = sum(j[2] for j in jobs)
    tokens = sum(j[3] for j in jobs)
    cost = total(j[5] for j in jobs if j[3]) if tokens else None  # nothing spent: no "$0"
    if len(jobs) == 1 and not jobs[0][0]:
        _, status, _, _, text, _ = jobs[0]
        return format_entry(
            when=when, job=task, status=status, seconds=seconds, tokens=tokens, text=text, cost=cost
        )
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j[1]] = counts.get(j[1], 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    head = (
        f"### {when.strftime('%H:%M')} {task} · {len(jobs)} jobs: {tally} · {seconds:.1f} s · "
        f"{tokens:,} tokens" + (f" · ${cost:.4f}" if cost is not None else "")
    )
    failed = [j for j in jobs if j[1] != "ok"][:SHOWN_FAILURES]
    done = [j for j in jobs if j[1] == "ok"][:SHOWN_ITEMS]
    lines = [
        f"> {item} ✗ {status}: {(first_lines(text, 1) or [''])[0]}"
        for item, status, _, _, text, _ in failed
    ]
    lines += [f"> {item}: {(first_lines(text, 1) or [''])[0]}" for item, _, _, _, text, _ in done]
    return head + "\n" + "\n".join(lines) + "\n\n"

"""Daily notes: after each job the runner, not the model, appends one entry to
workspace/memory/YYYY-MM-DD.md."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from pathlib import Path
from typing import NamedTuple

from claw_batch import baton
from claw_batch.figures import count
from claw_batch.llm.prices import plus
from claw_batch.memory.memoryfile import NOTES_DIR


def daily_note_path(root: Path, workspace: str, day: dt.date) -> Path:
    """The day's note: `<workspace>/memory/YYYY-MM-DD.md`."""
    return root / workspace / NOTES_DIR / f"{day.isoformat()}.md"


FIRST_LINES = 3
LINE_WIDTH = 160


def first_lines(text: str, n: int = FIRST_LINES) -> list[str]:
    """The first non-blank lines, shortened; a JSON result is shown on one line."""
    if text.lstrip().startswith(("{", "[")):
        with contextlib.suppress(ValueError, RecursionError):
            text = json.dumps(json.loads(text), ensure_ascii=False)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    shown = [ln if len(ln) <= LINE_WIDTH else ln[: LINE_WIDTH - 1] + "…" for ln in lines[:n]]
    if len(lines) > n:
        shown.append(f"… ({len(lines) - n} more lines)")
    return shown


CUT = "…"  # how first_lines marks a line it shortened, and lines it left out


def cut_mark(head: str | None, quoted: list[str]) -> str | None:
    """What a search says under a hit in a note entry whose quote first_lines shortened
    (`head`: the entry's `### HH:MM task · …` line); None when nothing was cut."""
    if not any(ln.endswith(CUT) or ln.lstrip("> ").startswith(f"{CUT} (") for ln in quoted):
        return None
    task = head.split(" · ")[0].split(" ", 2)[-1] if head else "TASK"
    return (
        f"[cut: a daily note keeps {FIRST_LINES} lines of {LINE_WIDTH} characters of a "
        f"result; `claw log` names the run, `claw show RUN {task}` shows it whole]"
    )


def format_entry(
    *,
    when: dt.datetime,
    job: str,
    status: str,
    seconds: float,
    tokens: int,
    text: str,
    cost: float | None = None,
    outside: bool = False,
    saved: str = "",
) -> str:
    head = f"### {when.strftime('%H:%M')} {job} · {status} · {seconds:.1f} s · "
    head += count(tokens, "token")
    head += f" · ${cost:.4f}" if cost is not None else ""
    head += saved
    quote = OUTSIDE if outside else "> "
    body = "\n".join(f"{quote}{ln}" for ln in first_lines(text))
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
            with baton.released():
                os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


SHOWN_ITEMS = 3  # results of a fan-out task quoted in its note
SHOWN_FAILURES = 5


class NoteJob(NamedTuple):
    item: str
    status: str
    seconds: float
    tokens: int
    text: str  # its result, or its error
    cost: float | None  # USD; None: the price is not known
    outside: bool = False  # it read content from outside the project
    saved_tokens: int = 0  # what the turns the call cache replayed would have cost
    saved_usd: float | None = None


def saved_text(tokens: int, usd: float | None) -> str:
    """` · saved 1,234 tokens ($0.0040)`: what the call cache replayed; "" when nothing."""
    if not tokens:
        return ""
    return f" · saved {count(tokens, 'token')}" + (f" (${usd:.4f})" if usd is not None else "")


# How a note quotes a job that read content from outside the project: the system prompt,
# which shows today's and yesterday's notes, leaves such lines out (context.py).
OUTSIDE = "> (from outside) "


def format_task_entry(*, when: dt.datetime, task: str, jobs: list[NoteJob]) -> str:
    """One entry for all the jobs a task ran in this run (TaskEntry, for a list)."""
    entry = TaskEntry()
    for job in jobs:
        entry.add(job)
    return entry.text(when, task)


class TaskEntry:
    """A task's entry, gathered as its jobs end: a run of 100,000 jobs keeps their tally
    and the few it quotes, not their list. A task without fan-out reads like a single job.
    The cost is shown when every job that used tokens has a known price."""

    def __init__(self) -> None:
        self.jobs = 0
        self.counts: dict[str, int] = {}
        self.seconds = 0.0
        self.tokens = 0
        self.cost: float | None = 0.0  # of the jobs that used tokens; None: a price unknown
        self.failed: list[NoteJob] = []  # the first SHOWN_FAILURES
        self.done: list[NoteJob] = []  # the first SHOWN_ITEMS
        self.saved_tokens = 0
        self.saved_usd: float | None = 0.0  # None: a price unknown

    def quotes(self, status: str) -> bool:
        """Whether a job that ended so would be quoted: its text is needed only then."""
        if status == "ok":
            return len(self.done) < SHOWN_ITEMS
        return len(self.failed) < SHOWN_FAILURES

    def add(self, job: NoteJob) -> None:
        self.jobs += 1
        self.counts[job.status] = self.counts.get(job.status, 0) + 1
        self.seconds += job.seconds
        self.tokens += job.tokens
        if job.tokens:
            self.cost = plus(self.cost, job.cost)
        if job.saved_tokens:
            self.saved_tokens += job.saved_tokens
            self.saved_usd = plus(self.saved_usd, job.saved_usd)
        if self.quotes(job.status):
            (self.done if job.status == "ok" else self.failed).append(job)

    def text(self, when: dt.datetime, task: str) -> str:
        cost = self.cost if self.tokens else None  # nothing spent: no "$0"
        if self.jobs == 1 and not (self.failed or self.done)[0].item:
            j = (self.failed or self.done)[0]
            return format_entry(
                when=when,
                job=task,
                status=j.status,
                seconds=self.seconds,
                tokens=self.tokens,
                text=j.text,
                cost=cost,
                outside=j.outside,
                saved=saved_text(self.saved_tokens, self.saved_usd),
            )
        tally = ", ".join(f"{n} {status}" for status, n in sorted(self.counts.items()))
        head = (
            f"### {when.strftime('%H:%M')} {task} · {count(self.jobs, 'job')}: {tally} · "
            f"{self.seconds:.1f} s · {count(self.tokens, 'token')}"
            + (f" · ${cost:.4f}" if cost is not None else "")
            + saved_text(self.saved_tokens, self.saved_usd)
        )
        lines = [f"{_quote(j)}{_name(j.item)} ✗ {j.status}: {_first(j.text)}" for j in self.failed]
        lines += [f"{_quote(j)}{_name(j.item)}: {_first(j.text)}" for j in self.done]
        return head + "\n" + "\n".join(lines) + "\n\n"


def _quote(job: NoteJob) -> str:
    return OUTSIDE if job.outside else "> "


def _name(item: str) -> str:
    """An item's path on one line, as a prompt shows it: a dropped file's name is the
    sender's, and a line break in it would start a line without the outside mark."""
    from claw_batch.safety.untrusted import printable, shown

    return printable(shown(item))


def _first(text: str) -> str:
    return (first_lines(text, 1) or [""])[0]

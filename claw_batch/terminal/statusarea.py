"""What the live status area shows: one row per running job (its model turn, its current
tool, its time) and the run's counters. Every row fits in the terminal's width less one
column (a row that wrapped would take two and the next redraw would leave half of it
behind), and the area never has more rows than the terminal less two (one for the cursor,
one for what scrolls)."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from claw_batch.safety.onscreen import visible

MAX_ROWS = 20  # even on a tall terminal: the jobs past it are "… and N more running"
WAITING = "waiting for the model"
FINISHING = "finishing"


@dataclass
class Running:
    """A running job as the area shows it: the model turn it is on and the tool calls of
    that turn still to finish (the first one is running)."""

    name: str
    task: str
    started: float
    step: int = 1
    calls: list[str] = field(default_factory=list)
    answered: bool = False  # a final answer came: the job checks and writes it
    node: str = ""  # the cluster node it runs on (--executor ray); "": here

    def follow(self, kind: str, fields: Mapping[str, Any]) -> None:
        """One of the job's events (see claw_batch.run.jobsink.JobSink)."""
        if kind == "assistant":
            self.step = fields["step"]
            self.calls = [visible(call["name"]) for call in fields.get("tool_calls", [])]
            self.answered = not self.calls
        elif kind == "tool_result":
            if self.calls:
                self.calls.pop(0)
            if not self.calls:
                self.step += 1  # the tools of the turn are done: the next turn starts
        elif kind == "correction":  # the answer was refused (a schema): asked again
            self.step += 1
            self.answered = False

    @property
    def activity(self) -> str:
        if self.calls:
            return self.calls[0]
        return FINISHING if self.answered else WAITING


@dataclass(frozen=True)
class Counters:
    running: int
    done: int
    failed: int
    skipped: int
    up_to_date: int
    to_run: int | None  # None: not known (nobody said how many jobs the run has)

    def text(self, red: bool) -> str:
        """`3 to run · 2 running · 5 done · 1 failed`: failed, skipped and up to date
        only once there are some."""
        parts = [] if self.to_run is None else [f"{self.to_run} to run"]
        parts += [f"{self.running} running", f"{self.done} done"]
        if self.failed:
            parts.append(f"\033[31m{self.failed} failed\033[0m" if red else f"{self.failed} failed")
        if self.skipped:
            parts.append(f"{self.skipped} skipped")
        if self.up_to_date:
            parts.append(f"{self.up_to_date} up to date")
        return " · ".join(parts)


def lines(
    running: list[Running], counters: Counters, size: tuple[int, int], now: float, color: bool
) -> list[str]:
    """The area's rows for a terminal of `size` (columns, rows): one per running job, as
    many as fit, then the counters."""
    columns, rows = size
    width = columns - 1
    room = min(rows - 2, MAX_ROWS)
    if room < 1 or width < 10:
        return []
    # All the jobs when they fit above the counters, else as many as leave a row for "more".
    shown = running if len(running) < room else running[: max(room - 2, 0)]
    name_width = min(max((cells(r.name) for r in shown), default=0), max(width // 2, 8))
    # A cluster run's: where each job runs, in a column of its own (until the node is
    # known, blank); none when no job runs on a node.
    node_width = min(max((cells(r.node) for r in shown), default=0), max(width // 3, 8))
    out = [fit(_job_line(r, name_width, now, node_width), width) for r in shown]
    if len(shown) < len(running) and room > 1:
        out.append(fit(f"  … and {len(running) - len(shown)} more running", width))
    counters_line = counters.text(False)
    if cells(counters_line) > width:
        out.append(fit(counters_line, width))
    else:  # colour only a line that fits: a cut could fall inside an escape code
        out.append(counters.text(color))
    return out


def _job_line(r: Running, name_width: int, now: float, node_width: int = 0) -> str:
    name = middle(r.name, name_width)
    pad = " " * (name_width - cells(name))
    if node_width:
        node = middle(r.node, node_width)
        pad += "  " + node + " " * (node_width - cells(node))
    return (
        f"  {name}{pad}  step {r.step:<2}  {r.activity:<{len(WAITING)}}  {elapsed(now - r.started)}"
    )


def elapsed(seconds: float) -> str:
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s // 60 % 60:02d}m"


def cells(text: str) -> int:
    """Columns the text takes on a terminal: wide (CJK) characters take two, combining
    marks none."""
    return sum(_cell(c) for c in text)


def _cell(c: str) -> int:
    if c.isascii():
        return 1
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def fit(text: str, width: int) -> str:
    """The text cut to `width` columns, with … where it was cut."""
    if cells(text) <= width:
        return text
    out, used = [], 0
    for c in text:
        if used + _cell(c) > width - 1:
            break
        out.append(c)
        used += _cell(c)
    return "".join(out) + "…"


def middle(text: str, width: int) -> str:
    """The text cut in the middle to `width` columns: a fan-out item's file name stays."""
    if cells(text) <= width:
        return text
    head = fit(text, (width + 1) // 2)[:-1]
    tail: list[str] = []
    used = cells(head) + 1
    for c in reversed(text):
        if used + _cell(c) > width:
            break
        tail.append(c)
        used += _cell(c)
    return head + "…" + "".join(reversed(tail))

"""What a run's jobs came to, per task: the counts, tokens, cost and time that the summary
at the end of `claw run` shows (a table on a terminal, one line in a log)."""

from __future__ import annotations

from dataclasses import dataclass, field

from claw_batch.figures import count

# The statuses of jobs that ran, or were stopped before they could (their upstream failed).
RAN = frozenset({"ok", "failed", "limit", "interrupted", "skipped"})
# Table columns: (status, heading); all but the first two only when a job has that status.
COLUMNS = (
    ("ok", "ok"),
    ("failed", "failed"),
    ("limit", "limit"),
    ("interrupted", "interrupted"),
    ("skipped", "skipped"),
    ("up-to-date", "up to date"),
    ("modified", "kept"),
)


@dataclass
class TaskTotals:
    statuses: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    cost_usd: float = 0.0
    costed: int = 0  # jobs that used tokens and whose cost is known
    uncosted: int = 0  # jobs that used tokens and whose cost is not (a model without a price)
    first_start: float | None = None
    last_end: float | None = None

    def add(self, status: str, tokens: int, cost_usd: float | None, ended: float) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.tokens += tokens
        if tokens and cost_usd is not None:
            self.cost_usd += cost_usd
            self.costed += 1
        elif tokens:
            self.uncosted += 1
        if status in RAN and status != "skipped":
            self.last_end = ended

    def started(self, when: float) -> None:
        if self.first_start is None:
            self.first_start = when

    @property
    def ran(self) -> int:
        return sum(n for status, n in self.statuses.items() if status in RAN)

    @property
    def seconds(self) -> float | None:
        if self.first_start is None or self.last_end is None:
            return None
        return self.last_end - self.first_start

    def merged(self, other: TaskTotals) -> TaskTotals:
        both = TaskTotals(dict(self.statuses))
        for status, n in other.statuses.items():
            both.statuses[status] = both.statuses.get(status, 0) + n
        both.tokens = self.tokens + other.tokens
        both.cost_usd = self.cost_usd + other.cost_usd
        both.costed = self.costed + other.costed
        both.uncosted = self.uncosted + other.uncosted
        return both


class RunTotals:
    """Per task, in the order their first job was settled or started."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskTotals] = {}
        self.started: float | None = None  # the run's first event

    def of(self, task: str, now: float) -> TaskTotals:
        if self.started is None:
            self.started = now
        totals = self.tasks.get(task)
        if totals is None:  # not setdefault: a TaskTotals made for every call
            totals = self.tasks[task] = TaskTotals()
        return totals

    def total(self) -> TaskTotals:
        out = TaskTotals()
        for t in self.tasks.values():
            out = out.merged(t)
        return out

    def count(self, status: str) -> int:
        return sum(t.statuses.get(status, 0) for t in self.tasks.values())

    def table(self, now: float) -> list[str]:
        """The summary table: one row per task, and a total row when there are several."""
        rows = [(name, t, t.seconds) for name, t in self.tasks.items()]
        if len(rows) > 1:
            rows.append(("total", self.total(), self._elapsed(now)))
        columns = [c for i, c in enumerate(COLUMNS) if i < 2 or self.count(c[0])]
        costs = any(t.costed for t in self.tasks.values())
        header = ["task", *(heading for _, heading in columns), "tokens"]
        header += ["cost"] if costs else []
        header += ["time"]
        cells = [header]
        for name, t, seconds in rows:
            row = [name, *(_count(t.statuses.get(status, 0)) for status, _ in columns)]
            row += [_count(t.tokens)]
            row += [cost_text(t)] if costs else []
            row += [f"{seconds:.1f} s" if seconds is not None else "-"]
            cells.append(row)
        return _align(cells)

    def line(self, now: float) -> str:
        """The summary in one line, for a log: `total: 12 ok, 1 failed (35.7 s, …)`."""
        t = self.total()
        parts = [f"{n} {word}" for status, word in _WORDS if (n := t.statuses.get(status, 0))]
        detail = f"{self._elapsed(now):.1f} s, {count(t.tokens, 'token')}"
        if any(task.costed for task in self.tasks.values()):
            detail += f", {cost_text(t)}"
        return f"total: {', '.join(parts)} ({detail})"

    def _elapsed(self, now: float) -> float:
        return now - self.started if self.started is not None else 0.0


_WORDS = (
    ("ok", "ok"),
    ("failed", "failed"),
    ("limit", "hit a limit"),
    ("interrupted", "interrupted"),
    ("skipped", "skipped"),
    ("up-to-date", "up to date"),
    ("modified", "kept"),
)


def cost_text(t: TaskTotals) -> str:
    """`$0.0123`; `$?` when a job's price is not known (as `claw log` says: a sum that
    would leave it out is not given); `-` when nothing was spent."""
    if t.uncosted:
        return "$?"
    return f"${t.cost_usd:.4f}" if t.costed else "-"


def _count(n: int) -> str:
    return f"{n:,}" if n else "-"


def _align(cells: list[list[str]]) -> list[str]:
    """The first column to the left, the others to the right, two spaces apart."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = []
    for row in cells:
        first = row[0].ljust(widths[0])
        rest = (cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))
        lines.append("  ".join([first, *rest]).rstrip())
    return lines

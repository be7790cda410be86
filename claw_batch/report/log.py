"""`claw log`'s page: the runs the ledger holds (claw_batch.store.history), one line per run
— when, how it ended, what started it, the command as typed — and one per job that ran in
it, a sub-job under its parent."""

from __future__ import annotations

import datetime as dt

from claw_batch.clock import shown_iso
from claw_batch.figures import count
from claw_batch.llm import prices
from claw_batch.safety.onscreen import visible
from claw_batch.store.deliveries import DeliveryRow
from claw_batch.store.history import JobRow, RunRow


def render(rows: list[RunRow]) -> str:
    """A page a person reads in the morning: one line per run, one per job that ran."""
    lines = []
    # What started each run, in a column as wide as the widest (hook pre-commit), at least
    # as wide as schedule.
    by = max((len(run.trigger) for run in rows), default=0)
    by = max(by, len("schedule"))
    for run in reversed(rows):  # oldest first, like a log
        when = shown_iso(run.started)
        took = _took(run.started, run.finished)
        spent = usd(prices.total(job.cost_usd for job in run.jobs if job.tokens))
        tokens = sum(job.tokens for job in run.jobs)
        cached = _cached(sum(job.cached_tokens for job in run.jobs), ", {:,} cached")
        totals = f", {count(tokens, 'token')}, {spent}{cached}" if run.jobs else ""
        totals += _saved(run.jobs)
        head = f"{when}  {run.status:<11} {run.trigger:<{by}} {run.command}"
        lines.append(f"{head}{took}{totals}  [{run.id}]")
        if run.batches:
            lines.append(f"  batches: {', '.join(run.batches)}")
        shown = _nested(run.jobs)
        width = max((len(name) for _, name in shown), default=0)
        nodes = _nodes(run.jobs)
        for job, name in shown:
            seconds = f"{job.duration_s:.1f} s" if job.duration_s is not None else "-"
            name = name.ljust(width)
            if nodes:  # a cluster run: where each job ran ("-": here)
                name += " " + (job.node or "-").ljust(nodes)
            cost = usd(job.cost_usd if job.tokens else 0.0)  # no model call, nothing spent
            line = f"  {job.status:<11} {name} {seconds:>8} {job.tokens:>9,} tok {cost:>9}  "
            line += _cached(job.cached_tokens, "{:,} cached  ")
            lines.append((line + _saved_of(job) + _detail(job)).rstrip())
        if not run.jobs:
            lines.append("  (no job ran: everything was up to date)")
        lines += [_undelivered(d) for d in run.deliveries if not d.ok]
    return visible("\n".join(lines) + ("\n" if lines else ""))  # items, errors, commands


def _undelivered(d: DeliveryRow) -> str:
    """A notice that did not arrive (`claw log --json` lists those that did too)."""
    tries = f"{d.attempts} attempt{'s' * (d.attempts != 1)}"
    return f"  notify failed {d.task}: {d.target} ({d.event}) after {tries}: {d.error or '?'}"


def _nested(jobs: tuple[JobRow, ...]) -> list[tuple[JobRow, str]]:
    """Each job with the name shown for it: a sub-job (`delegate`) right under its parent,
    indented and marked `↳`, its own sub-jobs under it; the others as they are, in order."""
    names = {job.name for job in jobs}
    children: dict[str, list[JobRow]] = {}
    for job in jobs:
        if job.parent in names:
            children.setdefault(job.parent, []).append(job)
    shown: list[tuple[JobRow, str]] = []

    def add(job: JobRow, depth: int) -> None:
        mark = "  " * (depth - 1) + "↳ " if depth else ""
        shown.append((job, mark + job.name))
        for child in children.pop(job.name, ()):  # popped: a cycle of names ends here
            add(child, depth + 1)

    for job in jobs:
        if job.parent not in names:
            add(job, 1 if job.parent else 0)  # a sub-job whose parent is not listed: marked
    return shown


def _nodes(jobs: tuple[JobRow, ...]) -> int:
    """The width of the node column: 0 (no column) when no job of the run ran on a
    cluster node (--executor ray)."""
    if not any(job.node for job in jobs):
        return 0
    return max(len(job.node or "-") for job in jobs)


def _cached(tokens: int, shown: str) -> str:
    """The prompt tokens a provider's prefix cache served, when it served any."""
    return shown.format(tokens) if tokens else ""


def _saved(jobs: tuple[JobRow, ...]) -> str:
    """`, saved 1,234 tokens, $0.0040`: what the call cache replayed instead of paying."""
    replayed = [job for job in jobs if job.saved_tokens]
    if not replayed:
        return ""
    tokens = sum(job.saved_tokens for job in replayed)
    return f", saved {count(tokens, 'token')}, {usd(prices.total(j.saved_usd for j in replayed))}"


def _saved_of(job: JobRow) -> str:
    if not job.saved_tokens:
        return ""
    return f"(saved {job.saved_tokens:,} tok {usd(job.saved_usd)})  "


def _detail(job: JobRow) -> str:
    """Its output, or why it did not succeed: a remembered verdict says whose it is."""
    if job.status == "ok" and job.output:
        return f"→ {job.output}"
    if job.remembered:
        return f"{job.whose}: {job.error or ''}"
    return job.error or ""


def _took(started: str, finished: str | None) -> str:
    if not finished:
        return ""
    seconds = (
        dt.datetime.fromisoformat(finished) - dt.datetime.fromisoformat(started)
    ).total_seconds()
    return f", {seconds:.1f} s"


def usd(value: float | None) -> str:
    """`$0.0123`; `$?` when the price is not known (tokens are shown beside it)."""
    return "$?" if value is None else f"${value:.4f}"

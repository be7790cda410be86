"""`claw report`'s page: one self-contained HTML file (no scripts, no fetched fonts or styles)
showing a period of the run ledger — totals, failures with their transcripts, a timeline of
each run's jobs, and tokens and cost per task per day. Everything from the ledger or a
transcript is escaped: task names, errors and model output are not to be trusted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from html import escape
from pathlib import Path

from claw_batch import figures
from claw_batch.clock import shown
from claw_batch.report.charts import Series, stacked_bars, status_class
from claw_batch.report.data import Cell, Period, total
from claw_batch.report.failures import failures
from claw_batch.report.style import CSS
from claw_batch.report.timeline import timeline

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#9c755f",
    "#ff9da7",
    "#5f6b7a",
)
OTHER = "#bab0ac"
NL = "\n"


def render(period: Period, *, root: Path, out: Path) -> str:
    """The page for `period` of the project at `root`, to be written at `out` (transcript
    links are relative to it)."""
    title = f"claw report · {root.name}"
    if not period.runs:
        body = '<p class="empty">No runs in this period.</p>'
    else:
        by_task = period.by_task_and_day()
        body = "\n".join(
            (
                _totals(period),
                failures(period, root, out),
                timeline(period),
                _charts(period, by_task),
                _task_table(period, by_task),
            )
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>"
        f'<header><h1>{escape(title)}</h1><p class="sub">{escape(_period_text(period))}</p>'
        f"</header>\n{body}\n</body></html>\n"
    )


def _period_text(period: Period) -> str:
    return f"{shown(period.since)} → {shown(period.now)} (UTC{period.now:%z})"


def _totals(period: Period) -> str:
    jobs = [j for j in period.jobs if j.started is not None]
    cell = total(Cell().add(j) for j in jobs)
    chips = " ".join(
        f'<span class="chip {status_class(s)}">{n} {escape(s)}</span>'
        for s, n in period.status_counts().items()
    )
    idle = sum(1 for run in period.runs if not run.jobs)
    runs_note = f"{idle} ran nothing (all up to date)" if idle else "&nbsp;"
    cached = f"{figures.tokens(cell.cached_tokens)} cached prompt tokens"
    return (
        '<section class="totals">'
        + _card("runs", str(len(period.runs)), runs_note)
        + _card("jobs", str(len(period.jobs)), chips)
        + _card("tokens", figures.tokens(cell.tokens), escape(cached))
        + _card("cost", *_cost_text(cell))
        + _saved_card(cell)
        + "</section>"
    )


def _saved_card(cell: Cell) -> str:
    """What the call cache replayed instead of paying: shown when it replayed anything."""
    if not cell.saved_tokens:
        return ""
    note = f"{figures.tokens(cell.saved_tokens)} tokens replayed from the call cache"
    return _card("saved", figures.usd(cell.saved_usd), escape(note))


def _card(name: str, value: str, note: str) -> str:
    return (
        f'<div class="card"><div class="label">{name}</div>'
        f'<div class="value">{escape(value)}</div><div class="note">{note}</div></div>'
    )


def _cost_text(cell: Cell) -> tuple[str, str]:
    """The known cost, and what it leaves out (escaped)."""
    if not cell.unpriced_jobs and not cell.cost_usd:
        return "$0", "no model call was priced" if not cell.priced_jobs else "&nbsp;"
    if not cell.priced_jobs:
        return "unknown", "no job's model has a known price"
    if not cell.unpriced_jobs:
        return figures.usd(cell.cost_usd), "&nbsp;"
    left_out = f"+ {figures.count(cell.unpriced_tokens, 'token')} at unknown prices"
    return figures.usd(cell.cost_usd), escape(left_out)


def _layers(by_task: dict[str, dict[dt.date, Cell]]) -> list[tuple[str, str, dict[dt.date, Cell]]]:
    """(name, colour, cells by day): the busiest tasks in their own colours, the rest as one."""
    named = list(by_task.items())[: len(PALETTE)]
    layers = [(task, PALETTE[n], days) for n, (task, days) in enumerate(named)]
    rest = list(by_task.items())[len(PALETTE) :]
    if rest:
        merged: dict[dt.date, Cell] = {}
        for _, days in rest:
            for day, cell in days.items():
                merged[day] = merged.get(day, Cell()) + cell
        layers.append((f"{len(rest)} other tasks", OTHER, merged))
    return layers


def _charts(period: Period, by_task: dict[str, dict[dt.date, Cell]]) -> str:
    layers = _layers(by_task)
    days = period.days
    token_series = [
        Series(name, colour, {d: c.tokens for d, c in cells.items()}, _job_notes(cells))
        for name, colour, cells in layers
    ]
    tokens_svg = stacked_bars(
        days, token_series, title="tokens per task per day", tick=figures.short, value=_tok
    )
    legend = _legend(
        (name, colour, figures.tokens(total(cells.values()).tokens))
        for name, colour, cells in layers
    )
    return (
        "<section><h2>Tokens per task per day</h2>"
        f'<div class="chart-box">{tokens_svg}</div>{legend}</section>'
        f"\n<section><h2>Cost per task per day</h2>{_cost_chart(days, layers)}</section>"
    )


def _cost_chart(days: list[dt.date], layers: list[tuple[str, str, dict[dt.date, Cell]]]) -> str:
    whole = total(c for _, _, cells in layers for c in cells.values())
    if not whole.priced_jobs:
        return (
            '<p class="none">No cost is known for this period: the models that ran have no '
            "known price. Their tokens are in the chart above.</p>"
        )
    series = [
        Series(name, colour, {d: c.cost_usd for d, c in cells.items() if c.priced_jobs}, {})
        for name, colour, cells in layers
    ]
    svg = stacked_bars(
        days, series, title="cost per task per day", tick=figures.usd_axis, value=figures.usd
    )
    sums = [(n, c, total(cells.values())) for n, c, cells in layers]
    legend = _legend((n, c, figures.usd(cell.cost_usd)) for n, c, cell in sums if cell.priced_jobs)
    note = ""
    if whole.unpriced_jobs:
        note = (
            f'<p class="dim">Not in this chart: {figures.count(whole.unpriced_jobs, "job")} '
            f"({figures.count(whole.unpriced_tokens, 'token')}) whose model has no known price."
            "</p>"
        )
    return f'<div class="chart-box">{svg}</div>{legend}{note}'


def _job_notes(cells: dict[dt.date, Cell]) -> dict[dt.date, str]:
    return {d: f" · {figures.count(c.jobs, 'job')}" for d, c in cells.items()}


def _tok(n: float) -> str:
    return figures.count(int(n), "token")


def _legend(entries: Iterable[tuple[str, str, str]]) -> str:
    """(name, colour, total) per layer."""
    items = "\n".join(
        f'<li><span class="swatch" style="background:{colour}"></span>{escape(name)} '
        f'<span class="dim">{escape(value)}</span></li>'
        for name, colour, value in entries
    )
    return f'<ul class="legend">{items}</ul>'


def _task_table(period: Period, by_task: dict[str, dict[dt.date, Cell]]) -> str:
    failed: dict[str, int] = {}
    for job in period.failures:
        failed[job.task] = failed.get(job.task, 0) + 1
    rows = []
    for task, days in by_task.items():
        cell = total(days.values())
        cost = figures.usd(cell.cost_usd) if cell.priced_jobs else "unknown"
        if cell.priced_jobs and cell.unpriced_jobs:
            cost += " + unknown"
        rows.append(
            f"<tr><td>{escape(task)}</td><td>{cell.jobs}</td><td>{failed.get(task, 0)}</td>"
            f"<td>{figures.tokens(cell.tokens)}</td><td>{figures.tokens(cell.cached_tokens)}</td>"
            f"<td>{escape(cost)}</td></tr>"
        )
    return (
        "<section><h2>Per task</h2><table><thead><tr><th>task</th><th>jobs run</th>"
        "<th>failed</th><th>tokens</th><th>cached</th><th>cost</th></tr></thead>"
        f"<tbody>\n{NL.join(rows)}\n</tbody></table></section>"
    )

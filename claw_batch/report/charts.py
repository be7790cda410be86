"""The report's pictures, drawn without scripts: a run's jobs as bars on lanes (HTML and CSS)
and stacked bars by day (inline SVG). Every text that reaches them is escaped here."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

from claw_batch import figures
from claw_batch.report.data import JobSpan, RunSpan

# Status -> CSS class: a status from the ledger never reaches an attribute as it is.
STATUS_CLASS = {
    "ok": "s-ok",
    "failed": "s-failed",
    "limit": "s-limit",
    "interrupted": "s-interrupted",
    "error": "s-error",
    "skipped": "s-skipped",
    "running": "s-running",
}
MIN_SHARE = 0.006  # the narrowest bar, as a share of its row: a 0.1 s job stays visible
LANE_PX = 22
NL = "\n"


def status_class(status: str) -> str:
    return STATUS_CLASS.get(status, "s-other")


def job_tooltip(job: JobSpan) -> str:
    unknown = job.cost_usd is None and job.tokens  # no model call: nothing spent
    cost = "cost unknown" if unknown else figures.usd(job.cost_usd or 0.0)
    said = f", {job.whose}" if job.remembered else f" ({job.reason})" if job.reason else ""
    parts = [job.name, job.status + said]
    if job.started is not None:
        parts += [figures.duration(job.duration_s), figures.count(job.tokens, "token"), cost]
    if job.node:  # a cluster run's
        parts.append(f"on {job.node}")
    return " · ".join(parts)


def lanes(run: RunSpan) -> list[tuple[JobSpan, float, float, int]]:
    """Each job that ran as (job, left, width, lane): shares of the run's span, and the first
    lane free when it starts, so that jobs running at once sit one above the other."""
    span = max((run.ended - run.started).total_seconds(), 1e-3)
    placed: list[tuple[JobSpan, float, float, int]] = []
    free_at: list[float] = []  # per lane, where its last bar ends
    for job in run.jobs:
        if job.started is None:
            continue
        left = min(max((job.started - run.started).total_seconds() / span, 0.0), 1.0)
        width = min(max(job.duration_s / span, MIN_SHARE), 1.0)
        left = min(left, 1.0 - width)
        lane = next((n for n, end in enumerate(free_at) if end <= left + 1e-9), len(free_at))
        if lane == len(free_at):
            free_at.append(0.0)
        free_at[lane] = left + width
        placed.append((job, left, width, lane))
    return placed


def timeline_track(run: RunSpan) -> str:
    """The bars of one run, left to right from its start to its end."""
    placed = lanes(run)
    height = max(1, 1 + max((lane for *_, lane in placed), default=0)) * LANE_PX
    bars = [
        f'<div class="bar {status_class(job.status)}" '
        f'style="left:{left * 100:.2f}%;width:{width * 100:.2f}%;top:{lane * LANE_PX}px" '
        f'title="{escape(job_tooltip(job))}">{escape(job.name)}</div>'
        for job, left, width, lane in placed
    ]
    return f'<div class="track" style="height:{height}px">\n{NL.join(bars)}\n</div>'


@dataclass(frozen=True)
class Series:
    """One stack layer: a name, its colour and its value per day."""

    name: str
    colour: str
    values: Mapping[dt.date, float]
    notes: Mapping[dt.date, str]  # the tooltip's text after the value, per day


W, H = 760, 200
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 40
TICKS = 4


def stacked_bars(
    days: Sequence[dt.date],
    series: Sequence[Series],
    *,
    title: str,
    tick: Callable[[float], str],
    value: Callable[[float], str],
) -> str:
    """An SVG of one bar per day, each series a layer in its colour, with a value axis
    (labelled by `tick`; a layer's tooltip gives its value by `value`)."""
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    most = max((sum(s.values.get(d, 0.0) for s in series) for d in days), default=0.0)
    top = figures.nice_step(most / TICKS) * TICKS
    out = [f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">']
    for n in range(TICKS + 1):
        y = TOP + plot_h - plot_h * n / TICKS
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(tick(top * n / TICKS))}</text>"
        )
    slot = plot_w / max(len(days), 1)
    bar = min(slot * 0.66, 56)
    every = max(1, round(len(days) / 12))  # at most about a dozen date labels
    for i, day in enumerate(days):
        x = LEFT + slot * i + (slot - bar) / 2
        out.extend(_stack(day, x, bar, series, top, plot_h, value))
        if i % every == 0 or i == len(days) - 1:
            cx = LEFT + slot * (i + 0.5)
            out.append(
                f'<text class="day" x="{cx:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">'
                f'{day:%a}<tspan x="{cx:.1f}" dy="13">{day:%m-%d}</tspan></text>'
            )
    out.append("</svg>")
    return "\n".join(out)


def _stack(
    day: dt.date,
    x: float,
    bar: float,
    series: Sequence[Series],
    top: float,
    plot_h: float,
    value_text: Callable[[float], str],
) -> list[str]:
    y = TOP + plot_h
    rects = []
    for s in series:
        value = s.values.get(day, 0.0)
        if value <= 0:
            continue
        h = max(plot_h * value / top, 1.0)
        y -= h
        tip = f"{s.name} · {day.isoformat()} · {value_text(value)}{s.notes.get(day, '')}"
        rects.append(
            f'<rect class="segment" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" '
            f'height="{h:.1f}" fill="{s.colour}"><title>{escape(tip)}</title></rect>'
        )
    return rects

"""The report's timeline: a row per run, newest first — when it started, how it ended, what
started it and the command as typed, its jobs as bars — and the filter that shows the runs of
one trigger."""

from __future__ import annotations

from html import escape

from claw_batch import figures
from claw_batch.clock import shown
from claw_batch.report.charts import status_class, timeline_track
from claw_batch.report.data import Period, RunSpan
from claw_batch.report.style import TRIGGERS

MAX_RUNS = 120  # timeline rows; older runs are counted, not drawn
NL = "\n"


def timeline(period: Period) -> str:
    ran = [run for run in period.runs if run.jobs]
    rows = [_run_row(run) for run in ran[:MAX_RUNS]]
    more = len(ran) - MAX_RUNS
    note = f'<p class="dim">{more} older runs are not drawn.</p>' if more > 0 else ""
    legend = " ".join(
        f'<span class="chip {status_class(s)}">{s}</span>'
        for s in ("ok", "failed", "limit", "interrupted", "error", "skipped")
    )
    return (
        "<section><h2>Timeline</h2>"
        f'<p class="dim">Newest first. Each row is one run, from its start (left) to its end '
        f"(right); jobs that ran at once are stacked. Hover a bar for its details. {legend}</p>"
        f'{_trigger_filter(ran)}<div class="timeline">\n{NL.join(rows)}\n</div>{note}</section>'
    )


def _trigger_filter(runs: list[RunSpan]) -> str:
    """Radio buttons that show the runs of one trigger (cron's apart from a hook's): CSS
    alone does it (style.TRIGGERS), the page has no scripts. None when one trigger ran all."""
    counts = {kind: 0 for kind in TRIGGERS}
    for run in runs:
        counts[run.started_by] = counts.get(run.started_by, 0) + 1
    present = {kind: n for kind, n in counts.items() if n}
    if len(present) < 2:
        return ""
    choices = [("all", f"all {len(runs)}", " checked")]
    choices += [(kind, f"{_by(kind)} {n}", "") for kind, n in present.items()]
    inputs = "".join(
        f'<input type="radio" name="by" id="by-{kind}"{checked}>' for kind, _, checked in choices
    )
    labels = " ".join(f'<label for="by-{kind}">{escape(text)}</label>' for kind, text, _ in choices)
    return f'{inputs}<div class="by-filter">Started by: {labels}</div>'


def _by(trigger: str) -> str:
    """`by hand`, `cron`, `hook pre-commit`: what started a run, as a chip says it."""
    return "by hand" if trigger == "hand" else trigger


def _run_row(run: RunSpan) -> str:
    took = figures.duration((run.ended - run.started).total_seconds())
    skipped = [j for j in run.jobs if j.started is None]
    chips = "".join(
        f'<span class="chip s-skipped" title="{escape(f"{j.name} · skipped · {j.reason}")}">'
        f"{escape(j.name)}</span>"
        for j in skipped
    )
    kind = run.started_by if run.started_by in TRIGGERS else "other"
    return (
        f'<div class="run t-{kind}"><div class="run-label">'
        f'<span class="time">{shown(run.started)}</span> '
        f'<span class="chip {status_class(run.status)}">{escape(run.status)}</span> '
        f'<span class="chip by">{escape(_by(run.trigger))}</span>'
        f'<div class="argv" title="{escape(run.argv)}">{escape(run.argv)}</div>'
        f'<div class="dim">{escape(run.id)} · {escape(took)}</div></div>'
        f"<div>{timeline_track(run)}"
        + (f'<div class="skipped">skipped: {chips}</div>' if skipped else "")
        + "</div></div>"
    )

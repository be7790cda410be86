"""The report's failures: each job that ended badly, with its transcript (the newest
embedded), and each failed verdict given again (a remembered verdict) once, with how often
and whose it is. Everything from the ledger or a transcript is escaped."""

from __future__ import annotations

import os
from html import escape
from pathlib import Path
from urllib.parse import quote

from claw_batch.clock import shown
from claw_batch.report.charts import status_class
from claw_batch.report.data import JobSpan, Period, Remembered
from claw_batch.report.show import render_event
from claw_batch.store.transcript import read_events

MAX_TRANSCRIPTS = 30  # failures whose transcript is embedded (the newest)
TRANSCRIPT_CHARS = 40_000
SUMMARY_CHARS = 200  # of an error's first line, in a failure's one-line summary
NL = "\n"


def failures(period: Period, root: Path, out: Path) -> str:
    """The section: each failure, then each verdict given again once, with how often."""
    failed, given = period.failures, period.remembered
    if not failed and not given:
        return '<section><h2>Failures</h2><p class="none">No job failed.</p></section>'
    items = [_failure(job, root, out, embed=n < MAX_TRANSCRIPTS) for n, job in enumerate(failed)]
    items += [_remembered(r, root, out) for r in given]
    again = f", and {len(given)} remembered" if given else ""
    return f"<section><h2>Failures ({len(failed)}{again})</h2>\n{NL.join(items)}\n</section>"


def _failure(job: JobSpan, root: Path, out: Path, *, embed: bool) -> str:
    why = _summary(job)
    when = shown(job.started) if job.started else ""
    head = (
        f'<span class="chip {status_class(job.status)}">{escape(job.status)}</span> '
        f'<b>{escape(job.name)}</b> <span class="dim">{escape(when)} · run {escape(job.run_id)}'
        f'</span><div class="why">{escape(why)}</div>'
    )
    parts = []
    if job.error and job.error.strip() != why:  # more than the summary shows
        parts.append(f'<pre class="error">{escape(job.error)}</pre>')
    path = _transcript_path(root, job.transcript)
    if path is not None and embed:
        text = escape(_transcript_text(path))
        parts.append(f'{_link(root, out, job)}<pre class="transcript">{text}</pre>')
    elif path is not None:
        parts.append(_link(root, out, job, f" (only the newest {MAX_TRANSCRIPTS} are shown)"))
    else:
        parts.append(_link(root, out, job))
    return f'<details class="failure"><summary>{head}</summary>{"".join(parts)}</details>'


def _summary(job: JobSpan) -> str:
    """The first line of its error (or its reason), cut to SUMMARY_CHARS."""
    why = (job.error or "").strip().partition("\n")[0] or job.reason or ""
    return why[: SUMMARY_CHARS - 1] + "…" if len(why) > SUMMARY_CHARS else why


def _link(root: Path, out: Path, job: JobSpan, note: str = "") -> str:
    """`Transcript: <a>…</a>`, relative to the page; or that there is none."""
    path = _transcript_path(root, job.transcript)
    if path is None:
        return '<p class="dim">No transcript.</p>'
    href = quote(Path(os.path.relpath(path, out.parent)).as_posix())
    return f'<p>Transcript: <a href="{escape(href)}">{escape(job.transcript or "")}</a>{note}</p>'


def _transcript_path(root: Path, rel: str | None) -> Path | None:
    """The transcript file, if it is one under .claw/runs/ (never anywhere else)."""
    if not rel:
        return None
    runs = (root / ".claw" / "runs").resolve()
    path = (root / rel).resolve()
    return path if path.is_relative_to(runs) and path.is_file() else None


def _transcript_text(path: Path) -> str:
    lines = [line for event in read_events(path) for line in render_event(event)]
    text = "\n".join(lines)
    if len(text) > TRANSCRIPT_CHARS:
        hidden = len(text) - TRANSCRIPT_CHARS
        text = text[:TRANSCRIPT_CHARS] + f"\n… ({hidden} more characters in the transcript file)"
    return text


def _remembered(given: Remembered, root: Path, out: Path) -> str:
    """`failed review · remembered 3×, verdict of run X`: its transcript is that run's."""
    job = given.newest
    why = _summary(job)
    times = f"{given.times}×, " if given.times > 1 else ""
    last = f" · last {shown(job.started)}" if job.started else ""
    head = (
        f'<span class="chip {status_class(job.status)}">{escape(job.status)}</span> '
        f'<b>{escape(job.name)}</b> <span class="dim">remembered {escape(times)}verdict of run '
        f'{escape(job.remembered or "")}{escape(last)}</span><div class="why">{escape(why)}</div>'
    )
    return f'<details class="failure"><summary>{head}</summary>{_link(root, out, job)}</details>'

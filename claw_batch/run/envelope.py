"""The `--json` envelope (SPEC §6), and summary.json: the same text, written a job at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, get_args

from claw_batch.llm.prices import plus
from claw_batch.run.results import Status

if TYPE_CHECKING:
    from claw_batch.run.results import JobResult, RunSummary

CHUNK = 1 << 16  # characters of summary.json handed to the file at a time


def envelope(summary: RunSummary) -> dict[str, Any]:
    totals = _Totals()
    jobs = [_row(r, totals) for r in summary.results]
    return {**_head(summary), "jobs": jobs, "totals": totals.fields()}


def envelope_chunks(summary: RunSummary, size: int = CHUNK) -> Iterator[bytes]:
    """`json.dumps(envelope(summary), indent=2)`, encoded, in pieces of about `size`: the
    envelope of a 100,000-job run (its rows as dicts, then as one string) is never whole."""
    pending: list[str] = []
    held = 0
    for part in _text(summary):
        pending.append(part)
        held += len(part)
        if held >= size:
            yield "".join(pending).encode()
            pending, held = [], 0
    if pending:
        yield "".join(pending).encode()


def _text(summary: RunSummary) -> Iterator[str]:
    yield "{\n"
    for key, value in _head(summary).items():
        yield f"  {json.dumps(key)}: {json.dumps(value)},\n"
    yield '  "jobs": ['
    totals = _Totals()  # summed as the rows go by: the results are read once
    for n, r in enumerate(summary.results):
        yield ("\n    " if n == 0 else ",\n    ") + _indented(_row(r, totals), "    ")
    yield "\n  ],\n" if totals.jobs else "],\n"
    yield f'  "totals": {_indented(totals.fields(), "  ")}\n}}'


def _indented(value: dict[str, Any], margin: str) -> str:
    """`value` as json.dumps(indent=2) writes it `margin` deep (a string holds no raw
    newline: JSON escapes it)."""
    return json.dumps(value, indent=2).replace("\n", "\n" + margin)


def _head(summary: RunSummary) -> dict[str, Any]:
    return {"run_id": summary.run_id, "exit_code": summary.exit_code, "error": summary.error}


def _row(r: JobResult, totals: _Totals) -> dict[str, Any]:
    totals.add(r)
    return {
        "task": r.job.task,
        "item": r.job.item,
        "status": r.status,
        "reason": r.reason,
        "duration_s": r.duration_s,
        "tokens": r.tokens,
        "cached_tokens": r.usage.cached_tokens,  # of its prompt tokens, from a prefix cache
        "cost_usd": _usd(r.cost_usd),
        "saved_tokens": r.saved_tokens,
        "saved_usd": _usd(r.saved_usd),
        "output": r.output,
        "error": r.error,
        "transcript": r.transcript or None,
        "reasons": list(r.reasons),
    }


class _Totals:
    """The totals of the jobs' rows, summed as they are written."""

    def __init__(self) -> None:
        self.jobs = 0
        # Every job status, in Status's order; "error" is the ledger's word for a job a
        # run-ending error stopped, never a result's.
        self.counts = {s: 0 for s in get_args(Status) if s != "error"}
        self.tokens = 0
        self.cached = 0
        self.cost: float | None = 0  # of the jobs that used tokens; None: a price unknown
        self.duration: float = 0
        self.saved_tokens = 0
        self.saved: float | None = 0  # of the jobs that replayed turns; None: a price unknown

    def add(self, r: JobResult) -> None:
        self.jobs += 1
        if r.status in self.counts:
            self.counts[r.status] += 1
        self.tokens += r.tokens
        self.cached += r.usage.cached_tokens
        if r.tokens:
            self.cost = plus(self.cost, r.cost_usd)
        self.duration += r.duration_s
        self.saved_tokens += r.saved_tokens
        if r.saved_tokens:
            self.saved = plus(self.saved, r.saved_usd)

    def fields(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            **self.counts,
            "tokens": self.tokens,
            "cached_tokens": self.cached,
            "cost_usd": _usd(self.cost),
            "saved_tokens": self.saved_tokens,
            "saved_usd": _usd(self.saved),
            "duration_s": round(self.duration, 3),
        }


def _usd(value: float | None) -> float | None:
    return None if value is None else round(value, 6)

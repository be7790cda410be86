"""The `--json` envelope (SPEC §6), and summary.json: the same text, written a job at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, get_args

from claw_batch.run.results import Status

if TYPE_CHECKING:
    from claw_batch.run.results import JobResult, RunSummary

CHUNK = 1 << 16  # characters of summary.json handed to the file at a time


def envelope(summary: RunSummary) -> dict[str, Any]:
    jobs = [_row(r) for r in summary.results]
    return {**_head(summary), "jobs": jobs, "totals": _totals(summary)}


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
    for n, r in enumerate(summary.results):
        yield ("\n    " if n == 0 else ",\n    ") + _indented(_row(r), "    ")
    yield "\n  ],\n" if summary.results else "],\n"
    yield f'  "totals": {_indented(_totals(summary), "  ")}\n}}'


def _indented(value: dict[str, Any], margin: str) -> str:
    """`value` as json.dumps(indent=2) writes it `margin` deep (a string holds no raw
    newline: JSON escapes it)."""
    return json.dumps(value, indent=2).replace("\n", "\n" + margin)


def _head(summary: RunSummary) -> dict[str, Any]:
    return {"run_id": summary.run_id, "exit_code": summary.exit_code, "error": summary.error}


def _row(r: JobResult) -> dict[str, Any]:
    return {
        "task": r.job.task,
        "item": r.job.item,
        "status": r.status,
        "reason": r.reason,
        "duration_s": r.duration_s,
        "tokens": r.tokens,
        "cost_usd": _usd(r.cost_usd),
        "output": r.output,
        "error": r.error,
        "transcript": r.transcript or None,
        "reasons": list(r.reasons),
    }


def _totals(summary: RunSummary) -> dict[str, Any]:
    # Every job status, in Status's order; "error" is the ledger's word for a job a run-ending
    # error stopped, never a result's.
    counts = {
        s: sum(1 for r in summary.results if r.status == s)
        for s in get_args(Status)
        if s != "error"
    }
    return {
        "jobs": len(summary.results),
        **counts,
        "tokens": sum(r.tokens for r in summary.results),
        "cost_usd": total_cost(summary.results),
        "duration_s": round(sum(r.duration_s for r in summary.results), 3),
    }


def total_cost(results: Sequence[JobResult]) -> float | None:
    """USD the jobs cost; None when one that used tokens has no known price."""
    from claw_batch.llm.prices import total

    return _usd(total(r.cost_usd for r in results if r.tokens))


def _usd(value: float | None) -> float | None:
    return None if value is None else round(value, 6)

"""The `--json` envelope (SPEC §6)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, get_args

from claw_batch.run.results import Status

if TYPE_CHECKING:
    from claw_batch.run.results import JobResult, RunSummary


def envelope(summary: RunSummary) -> dict[str, Any]:
    jobs = [
        {
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
        for r in summary.results
    ]
    # Every job status, in Status's order; "error" is the ledger's word for a job a run-ending
    # error stopped, never a result's.
    counts = {
        s: sum(1 for r in summary.results if r.status == s)
        for s in get_args(Status)
        if s != "error"
    }
    return {
        "run_id": summary.run_id,
        "exit_code": summary.exit_code,
        "error": summary.error,
        "jobs": jobs,
        "totals": {
            "jobs": len(jobs),
            **counts,
            "tokens": sum(r.tokens for r in summary.results),
            "cost_usd": total_cost(summary.results),
            "duration_s": round(sum(r.duration_s for r in summary.results), 3),
        },
    }


def total_cost(results: Sequence[JobResult]) -> float | None:
    """USD the jobs cost; None when one that used tokens has no known price."""
    from claw_batch.llm.prices import total

    return _usd(total(r.cost_usd for r in results if r.tokens))


def _usd(value: float | None) -> float | None:
    return None if value is None else round(value, 6)

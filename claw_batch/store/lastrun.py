"""How each job of a task last ended, from the ledger's jobs: what `claw why` and `claw list`
say of a job with no last success, instead of "never ran" (a failed check, every commit)."""

from __future__ import annotations

from typing import NamedTuple

from claw_batch.clock import shown_iso
from claw_batch.safety.onscreen import visible
from claw_batch.store.state import State

SHOWN_ERROR = 120  # characters of the error a reason quotes


class LastRun(NamedTuple):
    run_id: str
    status: str  # running (it never finished) | ok | failed | limit | interrupted | error
    reason: str | None
    error: str | None
    started: str  # ISO 8601

    def describe(self) -> str | None:
        """`failed in run X at T: check failed: why`; None for a success (its record is
        what the up-to-date check reads, not this)."""
        where = f"in run {self.run_id} at {when(self.started)}"
        error = visible(_first_line(self.error))  # a verdict's summary: the model's text
        said = f": {error}" if error else ""
        if self.status == "failed":
            check = "check failed" if self.reason == "check failed" else ""
            return f"failed {where}" + (f": {check}{said}" if check else said)
        if self.status == "limit":
            return f"hit a limit {where}{said}"
        if self.status == "interrupted":
            return f"was interrupted {where}"
        if self.status in ("running", "error"):  # killed, or stopped with its run
            return f"did not finish {where}{said}"
        return None


def last_runs(state: State, task: str) -> dict[str, LastRun]:
    """Per item ('' for a task without items): the job's latest row."""
    rows = state.select(
        "SELECT item, run_id, status, reason, error, started FROM jobs WHERE rowid IN "
        "(SELECT MAX(rowid) FROM jobs WHERE task = ? GROUP BY item)",
        (task,),
    )
    return {row[0]: LastRun(*row[1:]) for row in rows}


def when(iso: str | None) -> str:
    """A job's start as claw shows times (clock.shown); a row without one says so."""
    return "an unknown time" if iso is None else shown_iso(iso)


def _first_line(text: str | None) -> str:
    line = (text or "").strip().split("\n", 1)[0]
    return line if len(line) <= SHOWN_ERROR else line[: SHOWN_ERROR - 1] + "…"

"""How a job last ended, as `claw why` says it of a job with no last success."""

from __future__ import annotations

from pathlib import Path

import pytest

from claw_batch.store.lastrun import LastRun, last_runs
from claw_batch.store.state import State

AT = "2026-11-27T09:00:00+01:00"


@pytest.mark.parametrize(
    ("status", "reason", "error", "said"),
    [
        (
            "failed",
            "check failed",
            "a leftover",
            "failed in run r1 at 2026-11-27 09:00: check failed: a leftover",
        ),
        (
            "failed",
            "TaskFailed",
            "the answer was empty\nmore",
            "failed in run r1 at 2026-11-27 09:00: the answer was empty",
        ),
        (
            "limit",
            "timeout",
            "timeout: longer than 5 s",
            "hit a limit in run r1 at 2026-11-27 09:00: timeout: longer than 5 s",
        ),
        ("running", None, None, "did not finish in run r1 at 2026-11-27 09:00"),
        ("interrupted", "interrupted", "Ctrl-C", "was interrupted in run r1 at 2026-11-27 09:00"),
        ("ok", None, None, None),
    ],
)
def test_describe(status: str, reason: str | None, error: str | None, said: str | None) -> None:
    assert LastRun("r1", status, reason, error, AT).describe() == said


def test_the_latest_row_of_each_item(tmp_path: Path) -> None:
    state = State(tmp_path / "state.db")
    for run in ("r1", "r2"):
        state.begin_run(run, AT, "claw run")
        state.start_job(run, "t", "a", AT)
    state.start_job("r1", "t", "b", AT)
    state.start_job("r1", "other", "", AT)
    assert {item: last.run_id for item, last in last_runs(state, "t").items()} == {
        "a": "r2",
        "b": "r1",
    }
    state.close()

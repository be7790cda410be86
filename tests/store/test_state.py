"""The ledger's model calls: kept with the job until its final transaction."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from claw_batch.store.state import Done, JobRecord, State

RUN = "20261122-000000-abcdef"
USAGE = {"prompt": 10, "completion": 5, "cached": 2}


def record(item: str, status: str = "ok") -> JobRecord:
    return JobRecord(
        RUN, "t", item, status, None, "2026-11-22T00:00:00", 1.0, 20, 10, 4, None, None, None, None
    )


def calls(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT item, step, prompt_tokens FROM calls ORDER BY rowid").fetchall()


def open_run(tmp_path: Path) -> tuple[State, Path]:
    db = tmp_path / "state.db"
    state = State(db)
    state.begin_run(RUN, "2026-11-22T00:00:00", "claw run")
    for item in ("a", "b"):
        state.start_job(RUN, "t", item, "2026-11-22T00:00:00")
    return state, db


def test_calls_are_written_with_the_job_that_made_them(tmp_path: Path) -> None:
    state, db = open_run(tmp_path)
    state.record_call(RUN, "t", "a", 1, "m", USAGE, 0.1)
    state.record_call(RUN, "t", "b", 1, "m", USAGE, 0.1)
    state.record_call(RUN, "t", "a", 2, "m", {"prompt": 30}, 0.1)
    assert calls(db) == []  # no transaction per call
    state.succeed_job(record("a"), Done.of("t", "a", "fp", {}, {}, "text"))
    assert calls(db) == [("a", 1, 10), ("a", 2, 30)]
    state.finish_job(record("b", "failed"))
    assert calls(db) == [("a", 1, 10), ("a", 2, 30), ("b", 1, 10)]
    state.close()
    assert calls(db) == [("a", 1, 10), ("a", 2, 30), ("b", 1, 10)]


def test_calls_of_a_job_left_unfinished_are_written_on_close(tmp_path: Path) -> None:
    state, db = open_run(tmp_path)
    state.record_call(RUN, "t", "a", 1, "m", USAGE, 0.1)
    state.close()
    assert calls(db) == [("a", 1, 10)]


def test_jobs_that_end_while_another_writes_are_written_by_it(tmp_path: Path) -> None:
    """Group commit: rows of jobs that end during another's transaction go in the next one."""
    state, db = open_run(tmp_path)
    state.record_call(RUN, "t", "b", 1, "m", USAGE, 0.1)
    original = state._write_batch
    batches: list[list[str]] = []

    def write(batch: list[tuple[JobRecord, Done | None, object]]) -> None:
        batches.append([r.item for r, *_ in batch])
        if len(batches) == 1:  # job b ends while job a's rows are being written
            state.finish_job(record("b", "failed"))
            assert calls(db) == []  # b went on without waiting; its rows come next
        original(batch)

    state._write_batch = write  # type: ignore[method-assign]
    state.succeed_job(record("a"), Done.of("t", "a", "fp", {}, {}, "text"))
    assert batches == [["a"], ["b"]]
    assert calls(db) == [("b", 1, 10)]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT item, status FROM jobs ORDER BY item").fetchall()
    assert rows == [("a", "ok"), ("b", "failed")]
    state.close()


def test_jobs_that_end_together_make_their_outputs_durable_once_before_their_rows(
    tmp_path: Path,
) -> None:
    """The outputs' folders are fsynced (`durable`) before the transaction that records their
    jobs done, once for the jobs that share it: not a fsync a job."""
    state, db = open_run(tmp_path)
    state.start_job(RUN, "t", "c", "2026-11-22T00:00:00")
    said: list[tuple[str, list[str]]] = []

    def done_rows() -> list[str]:
        with sqlite3.connect(db) as conn:
            return [item for (item,) in conn.execute("SELECT item FROM done ORDER BY item")]

    def durable() -> None:
        said.append(("durable", done_rows()))
        if len(said) == 1:  # b and c end while a's outputs are being made durable
            for item in ("b", "c"):
                state.succeed_job(record(item), Done.of("t", item, "fp", {}, {}, "x"), durable)

    state.succeed_job(record("a"), Done.of("t", "a", "fp", {}, {}, "text"), durable)
    assert said == [("durable", []), ("durable", ["a"])]  # b and c: one call, before their rows
    assert done_rows() == ["a", "b", "c"]
    state.close()


def test_a_job_that_starts_again_is_no_longer_done(tmp_path: Path) -> None:
    """start_job marks the job running and deletes its `done` row in one statement."""
    state, db = open_run(tmp_path)
    state.succeed_job(record("a"), Done.of("t", "a", "fp", {}, {}, "text"))
    state.succeed_job(record("b"), Done.of("t", "b", "fp", {}, {}, "text"))
    assert [item for item, _ in state.sealed("t")] == ["a", "b"]
    state.begin_run("run-2", "2026-11-22T00:01:00", "claw run")
    state.start_job("run-2", "t", "a", "2026-11-22T00:01:00")
    assert [item for item, _ in state.sealed("t")] == ["b"]
    state.close()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT run_id, item, status FROM jobs ORDER BY rowid").fetchall()
    assert rows[-1] == ("run-2", "a", "running")


def test_a_batch_of_ends_larger_than_one_statement_takes(tmp_path: Path) -> None:
    """Rows go in multi-row statements, chunked under SQLite's parameter limit; a job's row
    is updated where its start put it (`claw log` lists jobs in the order they started)."""
    db = tmp_path / "state.db"
    state = State(db)
    state.begin_run(RUN, "2026-11-22T00:00:00", "claw run")
    items = [f"{i:03d}" for i in range(150)]
    for item in items:
        state.start_job(RUN, "t", item, "2026-11-22T00:00:00")
        for step in (1, 2, 3):
            state.record_call(RUN, "t", item, step, "m", USAGE, 0.1)
    ends = [
        (record(item), Done.of("t", item, "fp", {}, {}, "text") if int(item) % 2 else None, None)
        for item in reversed(items)
    ]
    with state.transaction():
        state._write_batch(ends)
    state.close()
    with sqlite3.connect(db) as conn:
        jobs = conn.execute("SELECT item, status, prompt_tokens FROM jobs ORDER BY rowid")
        assert jobs.fetchall() == [(item, "ok", 20) for item in items]
        assert conn.execute("SELECT count(*) FROM calls").fetchone() == (450,)
        done = conn.execute("SELECT item FROM done ORDER BY item").fetchall()
        assert done == [(item,) for item in items if int(item) % 2]


def jobs_status(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT item, status FROM jobs").fetchall())


def done_items(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [item for (item,) in conn.execute("SELECT item FROM done ORDER BY item")]


def test_the_ends_left_for_later_go_in_the_transaction_of_the_next_start(tmp_path: Path) -> None:
    """-j 1: the end of one job and the start of the next are one transaction; a job that
    starts with nothing left for later takes one statement, as ever."""
    state, db = open_run(tmp_path)
    state.record_call(RUN, "t", "a", 1, "m", USAGE, 0.1)
    state.succeed_job(record("a"), Done.of("t", "a", "fp", {}, {}, "text"), later=True)
    assert (jobs_status(db)["a"], done_items(db), calls(db)) == ("running", [], [])
    said: list[str] = []
    state.db.set_trace_callback(said.append)
    state.start_job(RUN, "t", "c", "2026-11-22T00:00:00")
    assert (said.count("BEGIN IMMEDIATE"), said.count("COMMIT")) == (1, 1)
    assert (jobs_status(db)["a"], jobs_status(db)["c"]) == ("ok", "running")
    assert (done_items(db), calls(db)) == (["a"], [("a", 1, 10)])
    said.clear()
    state.start_job(RUN, "t", "d", "2026-11-22T00:00:00")
    assert "BEGIN IMMEDIATE" not in said and jobs_status(db)["d"] == "running"
    state.close()


def test_the_ends_left_for_later_are_written_by_flush_and_before_the_run_ends(
    tmp_path: Path,
) -> None:
    state, db = open_run(tmp_path)
    state.finish_job(record("a", "failed"), later=True)
    assert jobs_status(db)["a"] == "running"
    state.flush()
    assert jobs_status(db)["a"] == "failed"
    state.finish_job(record("b", "failed"), later=True)
    state.end_run(RUN, "2026-11-22T00:01:00", "failed", 1)
    assert jobs_status(db)["b"] == "failed"
    state.close()


class _InterruptedLock:
    """A lock whose `fire_on`-th release is followed by a Ctrl-C: the main thread's signal
    handler (SIGINT, or SIGTERM made one) runs at that bytecode."""

    def __init__(self, fire_on: int) -> None:
        self.lock, self.released, self.fire_on = threading.Lock(), 0, fire_on

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *_: object) -> None:
        self.lock.release()
        self.released += 1
        if self.released == self.fire_on:
            raise KeyboardInterrupt


@pytest.mark.parametrize("fire_on", [1, 2], ids=["after-claiming-the-writer", "after-the-batch"])
def test_a_ctrl_c_in_the_scheduler_s_flush_loses_no_ended_job(tmp_path: Path, fire_on: int) -> None:
    """The scheduler (the main thread, where Ctrl-C lands) writes the ends left for later: an
    interrupt anywhere in its flush leaves them for end_run and close, written once."""
    state, db = open_run(tmp_path)
    state.succeed_job(record("a"), Done.of("t", "a", "fp", {}, {}, "text"), later=True)
    state._ends_lock = _InterruptedLock(fire_on)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        state.flush()
    state._ends_lock = threading.Lock()
    state.end_run(RUN, "2026-11-22T00:01:00", "interrupted", 130)
    state.close()
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT status FROM jobs WHERE item = 'a'").fetchall() == [("ok",)]
        assert c.execute("SELECT item FROM done").fetchall() == [("a",)]


def test_the_node_a_job_ran_on_is_kept(tmp_path: Path) -> None:
    """JobResult.node (the cluster node, --executor ray) goes into jobs.node as the recorder
    writes the row (JobRecord.of); a job that ran here keeps NULL."""
    from claw_batch.llm.usage import Usage
    from claw_batch.plan.jobs import Job
    from claw_batch.run.results import JobResult

    state, db = open_run(tmp_path)
    ran = JobResult(Job("t", "a"), "ok", None, 1.0, Usage(), None, None, "")
    there = JobRecord.of(RUN, "t", "a", "2026-11-22T00:00:00", ran._replace(node="10.0.0.7 (ab)"))
    state.finish_job(there)
    state.finish_job(JobRecord.of(RUN, "t", "b", "2026-11-22T00:00:00", ran))
    state.close()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT item, node FROM jobs ORDER BY item").fetchall()
    assert rows == [("a", "10.0.0.7 (ab)"), ("b", None)]

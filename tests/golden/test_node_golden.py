"""Golden: `claw log` and `claw show` of a cluster run (--executor ray), whose ledger rows say
the node each job ran on, beside a local run whose rows say none. The ledger and the
transcripts are written through the store's own API (State, Transcript), as the coordinator
writes them, so that the pages are exact: no clock, no cluster."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import claw, make_project
from syrupy.assertion import SnapshotAssertion

from claw_batch.safety.redact import Redactor
from claw_batch.store.state import JobRecord, State
from claw_batch.store.transcript import Transcript

CLAWFILE = """
    version: 1
    model: fake-model
    executor: {kind: ray, address: "10.0.0.5:6379"}
    tasks:
      tickets:
        foreach: "inbox/*.txt"
        prompt: "Ticket {{ item.path }}"
        output: "tickets/{{ item.stem }}.md"
"""
CLUSTER_RUN = "20261122-230500-a1b2c3"
LOCAL_RUN = "20261123-080000-d4e5f6"
HEAD = "127.0.0.1 (a3f09c1e)"
OTHER = "127.0.0.2 (5be4d07f)"


def job(run: str, item: str, status: str, node: str | None, error: str | None = None) -> JobRecord:
    stem = Path(item).stem
    return JobRecord(
        run,
        "tickets",
        item,
        status,
        "ModelError" if error else None,
        f"{run[:4]}-{run[4:6]}-{run[6:8]}T{run[9:11]}:{run[11:13]}:01+01:00",
        2.5,
        900,
        100,
        0,
        None,
        None if error else f"tickets/{stem}.md",
        error,
        f".claw/runs/{run}/tickets[{stem}].jsonl",
        node=node,
    )


def transcript(root: Path, run: str, item: str, status: str) -> None:
    stem = Path(item).stem
    t = Transcript(root / ".claw" / "runs" / run / f"tickets[{stem}].jsonl", Redactor([]))
    t.event("start", job=f"tickets[{item}]")
    t.event("user", content=f"Ticket {item}")
    t.event("assistant", step=1, content="done", usage={"prompt": 900, "completion": 100})
    t.event("end", status=status, seconds=2.5)
    t.close()


def ledger(root: Path) -> None:
    state = State(root / ".claw" / "state.db")
    rows = [
        (CLUSTER_RUN, "inbox/a.txt", "ok", HEAD, None),
        (CLUSTER_RUN, "inbox/b.txt", "ok", OTHER, None),
        (CLUSTER_RUN, "inbox/long-name.txt", "failed", OTHER, "the endpoint said 503"),
        (LOCAL_RUN, "inbox/a.txt", "ok", None, None),
    ]
    for run, argv, status, code in (
        (CLUSTER_RUN, "claw run --executor ray -j 8 -k", "failed", 1),
        (LOCAL_RUN, "claw run --executor local -B", "ok", 0),
    ):
        started = next(job(*r[:4]).started for r in rows if r[0] == run)
        state.begin_run(run, started, argv)
        for r in rows:
            if r[0] == run:
                state.start_job(run, "tickets", r[1], started)
                state.finish_job(job(*r))
                transcript(root, run, r[1], r[2])
        state.end_run(run, started.replace(":01+", ":09+"), status, code)
    state.close()


def test_log_and_show_name_the_node_of_each_job(
    tmp_path: Path, snapshot: SnapshotAssertion
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    ledger(root)
    log = claw(root, "log")
    assert log.exit_code == 0, log.stderr
    as_json = claw(root, "log", "--json")
    nodes = [[j["node"] for j in run["jobs"]] for run in json.loads(as_json.stdout)]
    assert nodes == [[None], [HEAD, OTHER, OTHER]]
    shown = claw(root, "show", CLUSTER_RUN)
    assert shown.exit_code == 0, shown.stderr
    local = claw(root, "show", LOCAL_RUN)
    assert " on " not in local.stdout
    assert {
        "log": log.stdout,
        "show": shown.stdout,
        "show local": local.stdout,
    } == snapshot

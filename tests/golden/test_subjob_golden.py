"""Golden: `claw log` and `claw show` of a run whose job delegated (issue 21 §2): sub-jobs under
their parent, indented, at the point of each `delegate` event, two levels deep; one sub-job
shown alone says whose it is. The ledger (with its `jobs.parent` column) and the transcripts
are written through the store's own API, as a run writes them: no clock, no model."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from helpers import claw, make_project
from syrupy.assertion import SnapshotAssertion

from claw_batch.safety.redact import Redactor
from claw_batch.store.state import JobRecord, State
from claw_batch.store.transcript import Transcript

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      release-check:
        prompt: "Check the notes for release risks"
        output: reports/release-check.md
        tools: [grep, delegate]
        delegate: {tasks: [note-risks]}
      note-risks:
        prompt: "The risks in {{ input.path }}"
        tools: [read, delegate]
      tidy:
        prompt: "Tidy"
        output: tidy.md
"""
RUN = "20261122-230500-a1b2c3"
STARTED = "2026-11-22T23:05:01+01:00"
FIRST, SECOND, DEEPER = "note-risks<3f2a9c1d>", "note-risks<9e8d7c6b>", "note-risks<0a1b2c3d>"


def transcript(root: Path, name: str, events: list[tuple[str, dict[str, object]]]) -> str:
    path = f".claw/runs/{RUN}/{name}.jsonl"
    t = Transcript(root / path, Redactor([]))
    t.event("start", job=name)
    for kind, fields in events:
        t.event(kind, **fields)
    t.close()
    return path


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"id": f"c-{name}", "name": name, "arguments": json.dumps(arguments)}


def delegated(
    job: str, path: str, task: str | None = "note-risks"
) -> tuple[str, dict[str, object]]:
    return ("delegate", {"task": task, "job": job, "status": "ok", "transcript": path})


def turn(step: int, content: str = "", *calls: dict[str, object]) -> tuple[str, dict[str, object]]:
    usage = {"prompt": 400, "completion": 40}
    return (
        "assistant",
        {"step": step, "content": content, "tool_calls": list(calls), "usage": usage},
    )


def result(content: str) -> tuple[str, dict[str, object]]:
    return ("tool_result", {"id": "c", "name": "x", "ok": True, "content": content})


def sub_job(root: Path, name: str, note: str, *more: tuple[str, dict[str, object]]) -> str:
    return transcript(
        root,
        name,
        [
            ("user", {"content": f"The risks in {note}"}),
            turn(1, "", call("read", path=note)),
            result("- Risk: the rebuild takes 40 minutes."),
            *more,
            turn(2 + len(more) // 3, f"- {Path(note).stem}: the index rebuild"),
            ("end", {"status": "ok", "seconds": 1.5}),
        ],
    )


def project(root: Path) -> None:
    deeper = sub_job(root, DEEPER, "workspace/notes/b.md")
    first = sub_job(
        root,
        FIRST,
        "workspace/notes/a.md",
        turn(2, "", call("delegate", prompt="Is the rebuild on the freeze's path?")),
        delegated(DEEPER, deeper, None),
        result("yes"),
    )
    second = sub_job(root, SECOND, "workspace/notes/c.md")
    parent = transcript(
        root,
        "release-check",
        [
            ("user", {"content": "Check the notes for release risks"}),
            turn(1, "", call("grep", pattern="Risk")),
            result("workspace/notes/a.md\nworkspace/notes/c.md"),
            turn(
                2,
                "",
                call("delegate", task="note-risks", input={"path": "workspace/notes/a.md"}),
                call("delegate", task="note-risks", input={"path": "workspace/notes/c.md"}),
            ),
            delegated(FIRST, first),
            result("- a: the index rebuild"),
            delegated(SECOND, second),
            result("- c: the index rebuild"),
            turn(3, "# Release check\n\n- The index rebuild threatens the freeze."),
            ("end", {"status": "ok", "seconds": 4.0}),
        ],
    )
    tidy = transcript(root, "tidy", [("end", {"status": "ok", "seconds": 0.5})])
    ledger(root, {"release-check": parent, FIRST: first, SECOND: second, DEEPER: deeper}, tidy)


def ledger(root: Path, paths: dict[str, str], tidy: str) -> None:
    state = State(root / ".claw" / "state.db")
    state.begin_run(RUN, STARTED, "claw run release-check tidy")
    parents = {FIRST: "release-check", SECOND: "release-check", DEEPER: FIRST}
    for name in paths:
        state.start_job(RUN, name, "", STARTED)
    state.start_job(RUN, "tidy", "", STARTED)
    for name in (DEEPER, FIRST, "tidy", SECOND, "release-check"):  # as they ended
        output = {"release-check": "reports/release-check.md", "tidy": "tidy.md"}.get(name)
        state.finish_job(
            JobRecord(
                RUN,
                name,
                "",
                "ok",
                None,
                STARTED,
                1.5,
                400,
                40,
                0,
                None,
                output,
                None,
                paths.get(name, tidy),
            )
        )
    state.end_run(RUN, STARTED.replace(":01+", ":09+"), "ok", 0)
    state.close()
    db = sqlite3.connect(root / ".claw" / "state.db")
    with db:
        if "parent" not in {row[1] for row in db.execute("PRAGMA table_info(jobs)")}:
            db.execute("ALTER TABLE jobs ADD COLUMN parent TEXT")  # before part D1's schema
        for name, parent in parents.items():
            db.execute("UPDATE jobs SET parent = ? WHERE task = ?", (parent, name))
    db.close()


def test_log_and_show_nest_sub_jobs_under_their_parent(
    tmp_path: Path, snapshot: SnapshotAssertion
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    project(root)
    pages = {}
    for args in (
        ("log",),
        ("log", "release-check"),
        ("log", "note-risks"),
        ("show", RUN),
        ("show", RUN, "release-check"),
        ("show", RUN, FIRST),
        ("show", RUN, "note-risks"),
        ("show", RUN, "tidy"),
    ):
        r = claw(root, *args)
        assert r.exit_code == 0, r.stderr
        pages[" ".join(args)] = r.stdout
    shown = pages[f"show {RUN}"]
    assert shown.count(f"== {FIRST}") == shown.count(f"== {DEEPER}") == 1  # in place, once
    assert pages[f"show {RUN} tidy"].count("== ") == 2  # its own: no sub-job
    assert pages[f"show {RUN} release-check"] in shown  # with its sub-jobs, not tidy
    assert pages == snapshot

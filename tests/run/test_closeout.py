"""What a run keeps of its finished jobs to its end: their answers only until the daily note
has them (a 100,000-job run holds no job's whole output); summary.json written a job at a
time."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

from claw_batch.clawfile.load import load_project
from claw_batch.llm.usage import Usage
from claw_batch.memory.notes import SHOWN_ITEMS
from claw_batch.plan.jobs import Job
from claw_batch.run import results as run_results
from claw_batch.run.envelope import envelope, envelope_chunks
from claw_batch.run.results import JobResult, RunSummary
from claw_batch.run.runner import Runner, RunOptions
from claw_batch.terminal.progress import Progress

CLAWFILE = """
version: 1
model: local-qwen
tasks:
  triage:
    foreach: "inbox/*.txt"
    prompt: "Triage {{ item.path }}."
    output: "out/{{ item.stem }}.md"
"""


def run_once(root: Path, srv: FakeOpenAI) -> list[tuple[str, str, str]]:
    env = {"OPENAI_BASE_URL": srv.base_url, "CLAW_NOW": "2026-11-22T23:05:00+01:00"}
    quiet = Progress(io.StringIO(), quiet=True, tty=False, ticker=False)
    runner = Runner(load_project(root), RunOptions(jobs=2), progress=quiet, environ=env)
    summary = runner.run()
    assert summary.exit_code == 0, summary.error
    return [(r.job.item or "", r.status, r.text) for r in summary.results]


def test_a_runs_results_keep_no_answer_and_the_note_quotes_the_first(tmp_path: Path) -> None:
    files = {f"inbox/{n}.txt": f"message {n}\n" for n in range(5)}
    root = make_project(tmp_path / "p", CLAWFILE, files)
    with FakeOpenAI() as srv:
        srv.handler = lambda request: text(f"ANSWER-{request['messages'][1]['content'][-6]}")
        kept = run_once(root, srv)
    assert sorted(kept) == [(f"inbox/{n}.txt", "ok", "") for n in range(5)]
    (note,) = (root / "workspace").rglob("20*.md")
    quoted = [line.split(": ")[-1] for line in note.read_text().splitlines() if "ANSWER" in line]
    first = [f"ANSWER-{item[-5]}" for item, _, _ in kept[:SHOWN_ITEMS]]
    assert quoted == first
    assert [(root / f"out/{n}.md").read_text() for n in range(5)] == [
        f"ANSWER-{n}\n" for n in range(5)
    ]


def test_summary_json_is_the_envelope_written_a_job_at_a_time(tmp_path: Path) -> None:
    files = {f"inbox/{n}.txt": f"message {n}\n" for n in range(3)}
    root = make_project(tmp_path / "p", CLAWFILE, files)
    with FakeOpenAI() as srv:
        srv.enqueue(text('é ✓ "quoted"\nline'), text("two"), text("three"))
        run_once(root, srv)
    (path,) = (root / ".claw" / "runs").glob("*/summary.json")
    written = json.loads(path.read_text())
    assert [j["status"] for j in written["jobs"]] == ["ok"] * 3
    assert written["totals"]["jobs"] == 3


@pytest.mark.parametrize("jobs", [0, 1, 3])
def test_the_envelopes_pieces_are_its_text(jobs: int) -> None:
    results = [
        JobResult(
            Job("triage", f"inbox/{n}.txt"),
            "failed" if n else "ok",
            "ModelError" if n else None,
            1.25,
            Usage(10, 5),
            f"out/{n}.md",
            'é "quoted"\nline' if n else None,
            f"runs/r/{n}.jsonl",
            reasons=("new", "its prompt changed") if n else (),
            cost_usd=0.00012345,
        )
        for n in range(jobs)
    ]
    summary = RunSummary("r1", results, 1, "stopped ✗")
    whole = json.dumps(envelope(summary), indent=2)
    for size in (1, 200, 1 << 16):
        assert b"".join(envelope_chunks(summary, size)).decode() == whole


def test_results_kept_on_disk_leave_every_output_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SPILL results a run keeps them on disk: `--json`, summary.json and the daily
    note still have every job, in the order they ended, and their totals."""
    monkeypatch.setattr(run_results, "SPILL", 2)
    files = {f"inbox/{n}.txt": f"message {n}\n" for n in range(5)}
    root = make_project(tmp_path / "p", CLAWFILE, files)
    env = {"CLAW_NOW": "2026-11-22T23:05:00+01:00"}
    with FakeOpenAI() as srv:
        n = lambda request: request["messages"][1]["content"][-6]  # noqa: E731
        srv.handler = lambda request: text("" if n(request) == "3" else f"ANSWER-{n(request)}")
        r = claw(root, "run", "-k", "--json", env={**env, "OPENAI_BASE_URL": srv.base_url})
    assert r.exit_code == 1
    printed = json.loads(r.stdout)
    (path,) = (root / ".claw" / "runs").glob("*/summary.json")
    assert json.loads(path.read_text()) == printed
    jobs = [(j["item"], j["status"], j["output"], bool(j["transcript"])) for j in printed["jobs"]]
    assert jobs == [
        (f"inbox/{n}.txt", "failed" if n == 3 else "ok", None if n == 3 else f"out/{n}.md", True)
        for n in range(5)
    ]
    assert printed["jobs"][3]["error"] == "the model's final answer was empty"
    totals = printed["totals"]
    assert (totals["jobs"], totals["ok"], totals["failed"]) == (5, 4, 1)
    assert totals["tokens"] == sum(j["tokens"] for j in printed["jobs"]) > 0
    (note,) = (root / "workspace").rglob("20*.md")
    entry = note.read_text()
    assert "triage · 5 jobs: 1 failed, 4 ok" in entry
    assert "> inbox/3.txt ✗ failed: the model's final answer was empty" in entry
    quoted = [line.split(": ")[-1] for line in entry.splitlines() if "ANSWER" in line]
    assert quoted == ["ANSWER-0", "ANSWER-1", "ANSWER-2"]

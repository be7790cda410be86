"""What a run keeps of its finished jobs to its end: their answers only until the daily note
has them (a 100,000-job run holds no job's whole output)."""

from __future__ import annotations

import io
from pathlib import Path

from fake_openai import FakeOpenAI, text
from helpers import make_project

from claw_batch.clawfile.load import load_project
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


def test_a_runs_results_keep_no_answer_and_the_note_has_them(tmp_path: Path) -> None:
    files = {f"inbox/{n}.txt": f"message {n}\n" for n in range(3)}
    root = make_project(tmp_path / "p", CLAWFILE, files)
    with FakeOpenAI() as srv:
        srv.enqueue(*(text(f"ANSWER-{n} " + "x" * 1000) for n in range(3)))
        kept = run_once(root, srv)
    assert sorted(kept) == [(f"inbox/{n}.txt", "ok", "") for n in range(3)]
    (note,) = (root / "workspace").rglob("20*.md")
    assert all(f"ANSWER-{n}" in note.read_text() for n in range(3))
    assert all((root / f"out/{n}.md").read_text().startswith("ANSWER-") for n in range(3))

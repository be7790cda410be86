"""Sub-jobs through `claw run` (claw_batch.run.delegation): a job's `delegate` calls run
jobs of other tasks (or ad-hoc ones) whose answers come back as tool results, each with its
own ledger row under its parent, transcript and daily-note line; an identical delegation is
up to date; calls in one turn run at the same time; refusals reach the model as errors."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, text, tool_calls
from helpers import claw, make_project

KEY = "sk-test-0123456789abcdef0123"
NOW = "2026-11-22T23:05:00+01:00"

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      lead:
        prompt: "Review the project."
        tools: [read, write, delegate]
        permissions: {write: ["notes/**"]}
        delegate: {tasks: [review-file]}
        output: out/lead.md
      review-file:
        prompt: "Review {{ input.path }}."
        tools: [read]
      other:
        prompt: "Something else."
"""
FILES = {"a.py": "print('a')\n", "b.py": "print('b')\n"}


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY, "CLAW_NOW": NOW}


def user(body: dict[str, Any]) -> str:
    return str(body["messages"][1]["content"])


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def lead(*first: dict[str, Any], sub: Callable[[dict[str, Any]], Reply] | None = None) -> Any:
    """A handler: the lead job makes `first` calls, then answers with their results; a
    sub-job's request goes to `sub` (default: it answers what it was asked)."""

    def handle(body: dict[str, Any]) -> Reply:
        if user(body).startswith("Review the project"):
            results = tool_results(body)
            if not results:
                return tool_calls(*first)
            return text("lead: " + " | ".join(results))
        if sub is not None:
            return sub(body)
        return text(f"ok: {user(body)}")

    return handle


def rows(root: Path) -> list[tuple[str, str, str, str | None]]:
    db = sqlite3.connect(root / ".claw/state.db")
    try:
        return db.execute("SELECT task, item, status, parent FROM jobs ORDER BY rowid").fetchall()
    finally:
        db.close()


def events(root: Path, pattern: str, *, newest: bool = False) -> list[dict[str, Any]]:
    runs = sorted((root / ".claw/runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    if not newest:
        (run,) = runs
    else:
        run = runs[-1]
    (path,) = run.glob(pattern)
    return [json.loads(line) for line in path.read_text().splitlines()]


def delegate(task: str, **input: Any) -> dict[str, Any]:
    return call("delegate", {"task": task, "input": input}, id=f"d-{task}-{len(input)}")


def test_a_sub_job_answers_its_parent_and_is_recorded_under_it(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    server.handler = lead(delegate("review-file", path="a.py"))
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    assert (root / "out/lead.md").read_text() == "lead: ok: Review a.py.\n"
    (parent, sub) = rows(root)
    assert parent == ("lead", "", "ok", None)
    assert sub[0].startswith("review-file<") and sub[0].endswith(">")
    assert sub[1:] == ("", "ok", "lead")
    # The sub-job's transcript, and the parent's event that names it.
    mine = events(root, "review-file*.jsonl")
    assert mine[0]["type"] == "start" and mine[0]["parent"] == "lead"
    assert mine[-1]["type"] == "end" and mine[-1]["status"] == "ok"
    said = [e for e in events(root, "lead.jsonl") if e["type"] == "delegate"]
    assert [(e["job"], e["status"]) for e in said] == [(sub[0], "ok")]
    assert said[0]["transcript"].startswith(".claw/runs/")
    assert (root / said[0]["transcript"]).is_file()
    # The daily note counts it under its parent's task.
    (note,) = (root / "workspace/memory").glob("*.md")
    entry = note.read_text().splitlines()
    assert entry[2].startswith("### 23:05 lead · 2 jobs: 2 ok")
    assert entry[3:5] == [f"> {sub[0]}: ok: Review a.py.", "> lead: lead: ok: Review a.py."]


def test_an_identical_delegation_is_up_to_date_and_asks_nothing(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    server.handler = lead(delegate("review-file", path="a.py"))
    assert claw(root, "run", "lead", env=env).exit_code == 0
    asked = len(server.requests)
    # The lead runs again (its prompt changed); its sub-job is up to date.
    clawfile = root / "clawfile.yaml"
    clawfile.write_text(clawfile.read_text().replace("the project.", "the project again."))
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    sub_requests = [b for b in server.requests[asked:] if user(b).startswith("Review a.py")]
    assert sub_requests == []
    assert (root / "out/lead.md").read_text() == "lead: ok: Review a.py.\n"
    said = [e for e in events(root, "lead.jsonl", newest=True) if e["type"] == "delegate"]
    assert [e["status"] for e in said] == ["up-to-date"]
    # Another input is another sub-job.
    server.handler = lead(delegate("review-file", path="b.py"))
    clawfile.write_text(
        clawfile.read_text().replace("the project again.", "the project once more.")
    )
    assert claw(root, "run", "lead", env=env).exit_code == 0
    assert (root / "out/lead.md").read_text() == "lead: ok: Review b.py.\n"


def test_a_changed_delegated_task_makes_its_parent_run_again(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    # As make reruns a target whose recipe changed: the parent's answer was made with the
    # sub-task as it was.
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    server.handler = lead(delegate("review-file", path="a.py"))
    assert claw(root, "run", "lead", env=env).exit_code == 0
    clawfile = root / "clawfile.yaml"

    def statuses() -> list[str]:
        r = claw(root, "run", "--json", "lead", env=env)
        return [j["status"] for j in json.loads(r.stdout)["jobs"]]

    assert statuses() == ["up-to-date"]
    # An unrelated task's change leaves it up to date; the sub-task's prompt does not.
    clawfile.write_text(clawfile.read_text().replace("Something else.", "Something other."))
    assert statuses() == ["up-to-date"]
    clawfile.write_text(
        clawfile.read_text().replace("Review {{ input.path }}.", "Check {{ input.path }}.")
    )
    assert statuses() == ["ok"]


def test_a_sub_job_whose_task_needs_another_runs_again_when_that_ones_output_changes(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    # As any job whose upstream changed: the sub-job's answer was made from the facts as
    # they were (its prompt does not show them: its tools read them).
    clawfile = """
        version: 1
        model: fake-model
        tasks:
          facts:
            prompt: "Facts from {{ read('facts.txt') }}."
            output: facts.md
          lead:
            prompt: "Review the project."
            tools: [delegate]
            needs: [facts]
            delegate: {tasks: [review-file]}
            output: out/lead.md
          review-file:
            prompt: "Review {{ input.path }}; facts.md says what is known."
            needs: [facts]
            tools: [read]
    """
    root = make_project(tmp_path / "p", clawfile, {**FILES, "facts.txt": "one"})
    fresh = lead(delegate("review-file", path="a.py"))

    def handle(body: dict[str, Any]) -> Reply:
        if user(body).startswith("Facts"):
            return text(f"known: {user(body)}")
        return fresh(body)

    server.handler = handle
    assert claw(root, "run", "lead", env=env).exit_code == 0
    (root / "facts.txt").write_text("two")
    assert claw(root, "run", "lead", env=env).exit_code == 0
    said = [e for e in events(root, "lead.jsonl", newest=True) if e["type"] == "delegate"]
    assert [e["status"] for e in said] == ["ok"]  # asked anew, not up to date


def test_delegate_calls_in_one_turn_run_at_the_same_time(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    both = threading.Barrier(2, timeout=20)  # neither answers until the other has asked

    def sub(body: dict[str, Any]) -> Reply:
        both.wait()
        return text(f"ok: {user(body)}")

    first = call("delegate", {"task": "review-file", "input": {"path": "a.py"}}, id="d1")
    second = call("delegate", {"task": "review-file", "input": {"path": "b.py"}}, id="d2")
    server.handler = lead(first, second, sub=sub)
    r = claw(root, "run", "-j", "2", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    # Results in the calls' order.
    assert (root / "out/lead.md").read_text() == "lead: ok: Review a.py. | ok: Review b.py.\n"


def test_an_unlisted_or_unknown_task_is_an_error_the_model_gets(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    server.handler = lead(delegate("other"), delegate("nope"))
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    out = (root / "out/lead.md").read_text()
    assert "error: task 'other' is not one this task may delegate to" in out
    assert "(its delegate.tasks: review-file)" in out
    assert "error: task 'nope' is not one" in out
    assert [row[0] for row in rows(root)] == ["lead"]


def test_an_ad_hoc_sub_job_gets_the_tools_it_asks_for_among_its_parents(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    seen: list[list[str]] = []

    def sub(body: dict[str, Any]) -> Reply:
        seen.append(sorted(t["function"]["name"] for t in body.get("tools", [])))
        return text("ad hoc done")

    asked = call("delegate", {"prompt": "Count the files.", "tools": ["read"]}, id="a1")
    server.handler = lead(asked, sub=sub)
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    assert seen == [["read"]]
    assert (root / "out/lead.md").read_text() == "lead: ad hoc done\n"
    (_, sub_row) = rows(root)
    assert sub_row[0].startswith("lead<") and sub_row[3] == "lead"


def test_an_ad_hoc_sub_job_never_gets_a_tool_its_parent_lacks(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    asked = call("delegate", {"prompt": "Run rm.", "tools": ["read", "bash"]}, id="a1")
    server.handler = lead(asked)
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    out = (root / "out/lead.md").read_text()
    assert "error: refused: bash: an ad-hoc sub-job gets only tools this job has" in out
    assert [row[0] for row in rows(root)] == ["lead"]


ESCAPE = """
    version: 1
    model: fake-model
    tasks:
      lead:
        prompt: "Review the project."
        tools: [delegate]
        delegate: {tasks: [note]}
        output: out/lead.md
      note:
        prompt: "Note {{ input.name }}."
        output: "reports/{{ input.name }}"
"""


@pytest.mark.parametrize("name", ["../clawfile.yaml", "../.claw/state.db", "a/../../prompts/x.md"])
def test_an_input_cannot_aim_a_sub_jobs_output_outside_its_folder(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], name: str
) -> None:
    """The model chooses `input`; an output path rendered from it is checked as any
    output is: one that leaves the task's folder, or names a control file, is refused."""
    root = make_project(tmp_path / "p", ESCAPE)
    before = (root / "clawfile.yaml").read_bytes()
    server.handler = lead(call("delegate", {"task": "note", "input": {"name": name}}, id="n"))
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    out = (root / "out/lead.md").read_text()
    assert "error: sub-job note<" in out and " ended failed: " in out
    assert (root / "clawfile.yaml").read_bytes() == before
    assert not (root / "reports").exists() or not any((root / "reports").iterdir())


def test_a_task_run_directly_sees_an_empty_input(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    clawfile = CLAWFILE.replace(
        '"Review {{ input.path }}."', '"Review {{ input }} {{ input.path is defined }}."'
    )
    root = make_project(tmp_path / "p", clawfile, FILES)
    server.handler = lambda body: text(f"ok: {user(body)}")
    r = claw(root, "run", "review-file", env=env)
    assert r.exit_code == 0, r.stderr
    assert [user(b) for b in server.requests] == ["Review {} False."]


def test_at_j_1_sub_jobs_called_together_run_one_at_a_time(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """-j bounds the sub-jobs running across the run: the first child's request waits a
    while for the second, which never comes while it is in flight."""
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    lock = threading.Lock()
    inflight, most = 0, 0
    other = threading.Event()

    def sub(body: dict[str, Any]) -> Reply:
        nonlocal inflight, most
        with lock:
            inflight += 1
            most = max(most, inflight)
        if most > 1:
            other.set()
        other.wait(0.5)
        with lock:
            inflight -= 1
        return text(f"ok: {user(body)}")

    first = call("delegate", {"task": "review-file", "input": {"path": "a.py"}}, id="d1")
    second = call("delegate", {"task": "review-file", "input": {"path": "b.py"}}, id="d2")
    server.handler = lead(first, second, sub=sub)
    r = claw(root, "run", "-j", "1", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    assert most == 1
    assert (root / "out/lead.md").read_text() == "lead: ok: Review a.py. | ok: Review b.py.\n"


def test_an_ad_hoc_sub_job_that_asks_for_itself_again_is_refused(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """The same prompt and tools from an ad-hoc sub-job is the same sub-job: refused as its
    own ancestor (waiting for itself, it would never end)."""
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    again = call("delegate", {"prompt": "Split.", "tools": ["delegate"]}, id="again")

    def sub(body: dict[str, Any]) -> Reply:
        got = tool_results(body)
        return text("child got: " + got[0]) if got else tool_calls(again)

    server.handler = lead(again, sub=sub)
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    out = (root / "out/lead.md").read_text()
    assert "child got: error: refused: this sub-job is one of this job's own ancestors" in out
    assert "(lead -> lead<" in out

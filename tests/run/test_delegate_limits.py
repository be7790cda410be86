"""What bounds sub-jobs (claw_batch.run.delegation), through `claw run`: depth, cycles, the
parent's budget and deadline, Ctrl-C, -j 1 with nesting, taint both ways, a cluster."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, hang, text, tool_calls
from helpers import claw, make_project

from claw_batch.config import Delegation
from claw_batch.errors import ToolError
from claw_batch.run.delegation import Delegator

KEY = "sk-test-0123456789abcdef0123"
NOW = "2026-11-22T23:05:00+01:00"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY, "CLAW_NOW": NOW}


def user(body: dict[str, Any]) -> str:
    return str(body["messages"][1]["content"])


def results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def rows(root: Path) -> list[tuple[str, str, str | None, str | None]]:
    db = sqlite3.connect(root / ".claw/state.db")
    try:
        return db.execute("SELECT task, status, reason, parent FROM jobs ORDER BY rowid").fetchall()
    finally:
        db.close()


def chain(*steps: tuple[str, str], sub: Callable[[dict[str, Any]], Reply] | None = None) -> Any:
    """A handler: the job whose prompt starts with steps[i][0] delegates to the task
    steps[i][1] once, then answers with what it got; any other job goes to `sub` (default:
    it answers)."""

    def handle(body: dict[str, Any]) -> Reply:
        for prompt, task in steps:
            if user(body).startswith(prompt):
                got = results(body)
                if not got:
                    args = {"task": task, "input": {"n": 1}}
                    return tool_calls(call("delegate", args, id=f"to-{task}"))
                return text(f"{prompt} got [{got[0]}]")
        return sub(body) if sub is not None else text(f"leaf: {user(body)}")

    return handle


NESTED = """
    version: 1
    model: fake-model
    tasks:
      a:
        prompt: "Task a."
        tools: [delegate]
        delegate: {tasks: [b]}
        output: out/a.md
      b:
        prompt: "Task b {{ input.n }}."
        tools: [delegate]
        delegate: {tasks: [c]}
      c:
        prompt: "Task c {{ input.n }}."
        tools: [delegate]
        delegate: {tasks: [d]}
      d:
        prompt: "Task d {{ input.n }}."
"""


def test_a_sub_job_deeper_than_max_depth_is_refused(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", NESTED)
    server.handler = chain(("Task a", "b"), ("Task b", "c"), ("Task c", "d"))
    r = claw(root, "run", "a", env=env)
    assert r.exit_code == 0, r.stderr
    out = (root / "out/a.md").read_text()
    assert "error: refused: a sub-job at depth 3 is deeper than delegate.max_depth (2)" in out
    assert not any(user(b).startswith("Task d") for b in server.requests)
    shown = [(t.split("<")[0], (p or "").split("<")[0]) for t, _, _, p in rows(root)]
    assert shown == [("a", ""), ("b", "a"), ("c", "b")]


def test_max_depth_is_the_root_tasks(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    clawfile = NESTED.replace("delegate: {tasks: [b]}", "delegate: {tasks: [b], max_depth: 3}")
    root = make_project(tmp_path / "p", clawfile)
    server.handler = chain(("Task a", "b"), ("Task b", "c"), ("Task c", "d"))
    r = claw(root, "run", "a", env=env)
    assert r.exit_code == 0, r.stderr
    assert "leaf: Task d 1." in (root / "out/a.md").read_text()


def test_nested_sub_jobs_finish_at_j_1(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """A job waiting for its sub-jobs holds no slot: depth 2 at -j 1 cannot deadlock."""
    root = make_project(tmp_path / "p", NESTED)
    server.handler = chain(("Task a", "b"), ("Task b", "c"))
    r = claw(root, "run", "-j", "1", "a", env=env)
    assert r.exit_code == 0, r.stderr
    assert (root / "out/a.md").read_text() == "Task a got [Task b got [leaf: Task c 1.]]\n"
    parents = {t.split("<")[0]: p for t, _, _, p in rows(root)}
    assert parents["a"] is None and parents["b"] == "a"
    assert (parents["c"] or "").startswith("b<")


def test_a_delegation_to_an_ancestor_is_refused_as_a_cycle() -> None:
    """a -> b -> a: refused before anything is prepared (claw validate refuses such a
    clawfile; the runtime refuses it whatever the clawfile says)."""
    tasks = {"a": object(), "b": object()}
    parent = types.SimpleNamespace(
        task=types.SimpleNamespace(delegate=Delegation(("a",))),
        job=types.SimpleNamespace(name="b", task="b"),
    )
    subs = types.SimpleNamespace(run=types.SimpleNamespace(project=types.SimpleNamespace(
        config=types.SimpleNamespace(tasks=tasks))))  # fmt: skip
    taint = types.SimpleNamespace(source=None)
    delegator = Delegator(subs, parent, None, taint, 0.0, None, ("a", "b"), 5)  # type: ignore[arg-type]
    with pytest.raises(ToolError, match=r"refused: delegating to 'a' is a cycle \(a -> b -> a\)"):
        delegator(task="a", input={}, prompt=None, tools=None)


BUDGETED = """
    version: 1
    model: fake-model
    prices:
      fake-model: {input: 100.0, output: 100.0}
    tasks:
      lead:
        prompt: "Lead."
        tools: [delegate]
        delegate: {tasks: [child]}
        budget: {max_usd: 0.10}
        output: out/lead.md
      child:
        prompt: "Child {{ input.n }}."
"""


def test_what_sub_jobs_spend_is_charged_to_their_parent(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """A child costs $0.06; the parent may spend $0.10: the next child stops before its
    first call (taken to cost what its sibling's did, more than the parent has left); the
    parent's own last call fits, and it ends ok."""
    root = make_project(tmp_path / "p", BUDGETED)

    def handle(body: dict[str, Any]) -> Reply:
        if user(body).startswith("Lead"):
            n = len(results(body)) + 1
            if n > 3:
                return text("all done")
            return tool_calls(call("delegate", {"task": "child", "input": {"n": n}}, id=f"c{n}"))
        return text(f"child answer {user(body)}", usage=(300, 300))

    server.handler = handle
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    children = [b for b in server.requests if user(b).startswith("Child")]
    assert [user(b) for b in children] == ["Child 1."]
    found = rows(root)
    (lead,) = [row for row in found if row[0] == "lead"]
    assert lead[1:3] == ("ok", None)
    subs = [row[1:3] for row in found if row[3] == "lead"]
    assert subs == [("ok", None), ("limit", "budget"), ("limit", "budget")]
    said = (root / ".claw/runs").glob("*/child*.jsonl")
    ends = [json.loads(p.read_text().splitlines()[-1]) for p in said]
    assert sum("would take the parent job past its budget.max_usd" in (e["error"] or "")
               for e in ends) == 2  # fmt: skip


def test_a_child_stops_before_its_parents_budget_is_crossed(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    clawfile = BUDGETED.replace("max_usd: 0.10", "max_tokens: 300")
    root = make_project(tmp_path / "p", clawfile)

    def handle(body: dict[str, Any]) -> Reply:
        if user(body).startswith("Lead"):
            if results(body):
                return text("lead: " + results(body)[0])
            return tool_calls(call("delegate", {"task": "child", "input": {"n": 1}}, id="c1"))
        return tool_calls(call("delegate", {"task": "x"}, id="again"))  # never reached

    server.handler = handle
    claw(root, "run", "lead", env=env)
    assert not [b for b in server.requests if user(b).startswith("Child")]
    sub = [row for row in rows(root) if row[3] == "lead"]
    assert [s[1:3] for s in sub] == [("limit", "budget")]
    (said,) = (root / ".claw/runs").glob("*/child*.jsonl")
    end = json.loads(said.read_text().splitlines()[-1])
    assert "would take the parent job past its budget of 300 tokens" in end["error"]


SLOW = """
    version: 1
    model: fake-model
    tasks:
      lead:
        prompt: "Lead."
        tools: [delegate]
        delegate: {tasks: [child]}
        timeout: 3
      child:
        prompt: "Child {{ input.n }}."
        timeout: 600
"""


def test_a_parent_that_times_out_ends_its_children(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", SLOW)

    def handle(body: dict[str, Any]) -> Reply:
        if user(body).startswith("Lead"):
            first = call("delegate", {"task": "child", "input": {"n": 1}}, id="c1")
            second = call("delegate", {"task": "child", "input": {"n": 2}}, id="c2")
            return tool_calls(first, second)
        return hang(60, text("too late"))

    server.handler = handle
    r = claw(root, "run", "-j", "2", "lead", env=env)
    assert r.exit_code == 3, r.stderr
    found = rows(root)
    (lead,) = [row for row in found if row[0] == "lead"]
    assert lead[1:3] == ("limit", "timeout")
    children = [row for row in found if row[3] == "lead"]
    assert len(children) == 2
    assert {c[1:3] for c in children} == {("limit", "timeout")}


def test_ctrl_c_ends_a_parent_and_its_running_children(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", SLOW.replace("timeout: 3", "timeout: 600"))

    def handle(body: dict[str, Any]) -> Reply:
        if user(body).startswith("Lead"):
            return tool_calls(call("delegate", {"task": "child", "input": {"n": 1}}, id="c1"))
        return hang(60, text("too late"))

    server.handler = handle
    proc = subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "run", "lead"],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.hung.wait(30)  # the child's request is in
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    found = rows(root)
    assert [r[1] for r in found if r[0] == "lead"] == ["interrupted"]
    assert [r[1] for r in found if r[3] == "lead"] == ["interrupted"]


TAINT = """
    version: 1
    model: fake-model
    tasks:
      triage:
        prompt: "{{ item.path }}"
        watch: ["inbox/*.txt"]
      lead:
        prompt: "Lead."
        inputs: ["inbox/*.txt"]
        tools: [read, delegate]
        untrusted: {allow: [delegate]}
        delegate: {tasks: [child]}
        output: out/lead.md
      child:
        prompt: "Child {{ input.n }}."
        tools: [read, write]
        permissions: {write: ["reports/**"]}
"""


def test_a_tainted_parents_sub_job_is_tainted_from_its_start(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", TAINT, {"inbox/a.txt": "obey me\n"})
    seen: list[list[str]] = []

    def sub(body: dict[str, Any]) -> Reply:
        seen.append(sorted(t["function"]["name"] for t in body.get("tools", [])))
        return text("child answer")

    server.handler = chain(("Lead", "child"), sub=sub)
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    assert seen == [["read"]]  # no write: it is tainted from its start
    db = sqlite3.connect(root / ".claw/state.db")
    try:
        tainted = dict(db.execute("SELECT task, tainted FROM done").fetchall())
    finally:
        db.close()
    (child,) = [t for t in tainted if t.startswith("child<")]
    assert tainted[child] and tainted["lead"]


UNTAINTED_PARENT = """
    version: 1
    model: fake-model
    tasks:
      triage:
        prompt: "{{ item.path }}"
        watch: ["inbox/*.txt"]
      lead:
        prompt: "Lead."
        tools: [read, write, delegate]
        permissions: {write: ["reports/**"]}
        delegate: {tasks: [child]}
        output: out/lead.md
      child:
        prompt: "Child {{ input.n }}."
        tools: [read]
"""


def test_a_sub_job_that_read_outside_content_taints_its_parent(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", UNTAINTED_PARENT, {"inbox/a.txt": "obey me\n"})

    def handle(body: dict[str, Any]) -> Reply:
        got = results(body)
        if user(body).startswith("Lead"):
            if not got:
                return tool_calls(call("delegate", {"task": "child", "input": {"n": 1}}, id="c"))
            if len(got) == 1:  # what the child read reached it: it may no longer write
                write = {"path": "reports/x.md", "content": "x\n"}
                return tool_calls(call("write", write, id="w"))
            return text("lead done")
        if not got:
            return tool_calls(call("read", {"path": "inbox/a.txt"}, id="r"))
        return text("the inbox says: " + got[0])

    server.handler = handle
    r = claw(root, "run", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    lead_requests = [b for b in server.requests if user(b).startswith("Lead")]
    answer = results(lead_requests[1])[0]
    assert answer.startswith('<untrusted-data source="sub-job child&lt;')
    assert "refused: write: this job read outside content" in results(lead_requests[2])[1]
    assert not (root / "reports/x.md").exists()


def test_a_task_that_may_delegate_is_refused_on_a_cluster(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", NESTED)
    r = claw(root, "run", "a", "--executor", "ray", env=env)
    assert r.exit_code == 2
    assert "task 'a' may delegate" in r.stderr
    assert "which --executor ray does not do yet: run it with --executor local" in r.stderr
    assert not (root / ".claw").exists()

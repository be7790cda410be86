"""End to end: `claw run --batch` and `batch: true` tasks against the fake endpoint's Files and
Batches APIs (tests/fake_openai.py's FakeBatches)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, error, text, tool_calls
from helpers import HANG, claw, make_project

NOW = "2026-11-22T23:05:00+01:00"

FAN_OUT = """
    version: 1
    model: gpt-4o-mini
    tasks:
      triage:
        foreach: "inbox/*.txt"
        prompt: "Triage {{ item.path }}."
        output: "tickets/{{ item.stem }}.md"
        tools: [read]
      digest:
        prompt: "Read notes/a.md and digest it."
        output: digest.md
        tools: [read]
"""
FILES = {"inbox/a.txt": "A", "inbox/b.txt": "B", "inbox/c.txt": "C", "notes/a.md": "the note"}
# For the runs in a child process, whose quiet window a test cannot widen: one triage, so its
# batch is one whatever the machine's load.
ONE = {"inbox/a.txt": "A", "notes/a.md": "the note"}


@pytest.fixture(autouse=True)
def wide_quiet_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run in this process gathers its jobs' requests for 1.5 s, not 0.5 s: on a loaded
    machine its jobs may start further apart, and the tests count what each batch holds."""
    from claw_batch.llm import batch

    monkeypatch.setattr(batch, "QUIET", 1.5)


def answer(body: dict[str, Any]) -> Reply:
    """One turn for a triage, two for the digest (a read, then the answer)."""
    prompt = body["messages"][1]["content"]
    if prompt.startswith("Triage"):
        return text(f"triaged: {prompt}")
    if not any(m["role"] == "tool" for m in body["messages"]):
        return tool_calls(call("read", {"path": "notes/a.md"}))
    return text("digest of " + body["messages"][-1]["content"][:40])


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        srv.handler = answer
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "CLAW_NOW": NOW,
    }


def lines_batched(server: FakeOpenAI) -> int:
    return sum(b["request_counts"]["total"] for b in server.batch.batches.values())


def test_batch_runs_a_fan_out_and_a_multi_turn_job_in_rounds(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    r = claw(root, "run", "--batch", "--json", env=env)
    assert r.exit_code == 0, r.stderr
    assert (root / "tickets/a.md").read_text() == "triaged: Triage inbox/a.txt.\n"
    assert (root / "digest.md").read_text().startswith("digest of ")
    assert "the note" in (root / "digest.md").read_text()
    # Every call went through a batch: 3 triages, the digest's two turns; the second turn
    # in a later batch, after the read ran here.
    assert len(server.requests) == 5 and lines_batched(server) == 5
    assert server.batch.created >= 2 and server.batch.uploads == server.batch.created
    doc = json.loads(r.stdout)
    assert {j["status"] for j in doc["jobs"]} == {"ok"}
    # gpt-4o-mini at half of list (0.075 / 0.30 per million): 10 prompt + 5 completion
    # tokens a call, 5 calls
    assert doc["totals"]["cost_usd"] == pytest.approx(5 * (10 * 0.075 + 5 * 0.30) / 1e6, abs=1e-6)
    assert doc["totals"]["cost_usd"] < 5 * (10 * 0.15 + 5 * 0.60) / 1e6 * 0.55
    db = sqlite3.connect(root / ".claw/state.db")
    assert db.execute("SELECT COUNT(*) FROM calls").fetchone() == (5,)
    assert db.execute("SELECT status FROM batches").fetchall() == [("completed",)] * (
        server.batch.created
    )
    assert db.execute("SELECT COUNT(*) FROM batch_requests").fetchone() == (0,)
    assert "claw: batch batch_fake1: " in r.stderr


@pytest.mark.parametrize("stated", [True, False], ids=["batch-price", "list-price"])
def test_batch_true_on_a_task_and_its_price(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], stated: bool
) -> None:
    """A clawfile price's `batch:` entry; without one, its list price (no discount guessed)."""
    batch = ", batch: {input: 0.5, output: 1}" if stated else ""
    clawfile = (
        FAN_OUT.replace(
            '        output: "tickets/{{ item.stem }}.md"\n',
            '        output: "tickets/{{ item.stem }}.md"\n        batch: true\n',
        )
        + f"    prices:\n      gpt-4o-mini: {{input: 1, output: 2{batch}}}\n"
    )
    root = make_project(tmp_path / "p", clawfile, FILES)
    r = claw(root, "run", "--json", env=env)
    assert r.exit_code == 0, r.stderr
    assert lines_batched(server) == 3  # the triages; the digest's two turns were live
    assert len(server.requests) == 5
    jobs = {j["task"] + (j["item"] or ""): j for j in json.loads(r.stdout)["jobs"]}
    batch_price = (10 * 0.5 + 5 * 1) / 1e6 if stated else (10 * 1 + 5 * 2) / 1e6
    assert jobs["triageinbox/a.txt"]["cost_usd"] == pytest.approx(batch_price)
    assert jobs["digest"]["cost_usd"] == pytest.approx(2 * (10 * 1 + 5 * 2) / 1e6)


def test_a_provider_without_a_batch_api_says_so(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.batch.enabled = False
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    r = claw(root, "run", "digest", "--batch", env=env)
    assert r.exit_code == 1
    assert "HTTP 404" in r.stderr and "has no Batch API" in r.stderr, r.stderr
    assert "without --batch" in r.stderr
    assert server.requests == []


def test_a_refused_key_names_its_variable(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.batch.refuse = error(401, "bad key sk-test-0123456789abcdef0123")
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    r = claw(root, "run", "digest", "--batch", env=env)
    assert r.exit_code == 1
    assert "HTTP 401" in r.stderr and "$OPENAI_API_KEY" in r.stderr, r.stderr
    assert "sk-test-0123456789abcdef0123" not in r.stderr


def test_an_expired_batch_resubmits_only_its_missing_lines(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.batch.expire_after = 1  # the first batch answers one line, then expires
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    first, second = server.batch.batches.values()
    assert first["status"] == "expired" and first["request_counts"]["total"] == 3
    assert second["request_counts"]["total"] == 2  # only the two lines without a reply
    assert len(server.requests) == 3  # each triage answered once
    assert "(expired): 2 requests without a reply submitted again" in r.stderr
    assert sorted(p.name for p in (root / "tickets").iterdir()) == ["a.md", "b.md", "c.md"]


def test_failed_lines_are_retried_or_fail_their_job_with_the_reason(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    answers = {
        "Triage inbox/a.txt.": [error(500, "overloaded"), text("a at last")],
        "Triage inbox/b.txt.": [error(400, "bad request: context too long")],
        "Triage inbox/c.txt.": [text("c")],
    }
    server.handler = lambda body: answers[body["messages"][1]["content"]].pop(0)
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    r = claw(root, "run", "triage", "--batch", "-k", env=env)
    assert r.exit_code == 1
    assert (root / "tickets/a.md").read_text() == "a at last\n"
    assert (root / "tickets/c.md").read_text() == "c\n"
    assert not (root / "tickets/b.md").exists()
    assert "HTTP 400: bad request: context too long" in r.stderr, r.stderr


def test_batch_wait_stops_the_run_and_the_next_run_finishes_without_uploading(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    # 1 s: less than the quiet window, and still its jobs' requests are submitted
    r = claw(root, "run", "triage", "--batch", "--batch-wait", "1s", "--json", env=env)
    assert r.exit_code == 3, r.stderr
    assert {(j["status"], j["reason"]) for j in json.loads(r.stdout)["jobs"]} == {
        ("limit", "batch-wait")
    }
    assert "batch-wait: the run waited 1.0 s for its batches" in r.stderr
    assert "is left running" in r.stderr and "`claw run --batch` again" in r.stderr
    assert (server.batch.uploads, server.batch.created) == (1, 1)
    server.batch.held = False
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert "re-attached to batch batch_fake1" in r.stderr
    assert (server.batch.uploads, server.batch.created) == (1, 1)
    assert len(server.requests) == 3
    assert sorted(p.name for p in (root / "tickets").iterdir()) == ["a.md", "b.md", "c.md"]


def test_bad_batch_wait_is_a_usage_error(tmp_path: Path, env: dict[str, str]) -> None:
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    r = claw(root, "run", "--batch", "--batch-wait", "soon", env=env)
    assert r.exit_code == 2
    assert "--batch-wait 'soon': expected a duration such as 30m" in r.stderr


def test_a_run_killed_while_polling_resumes_without_a_second_upload(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    child = subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "run", "triage", "--batch"],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert server.batch.created_event.wait(HANG)
        while server.batch.retrieves == 0:  # it polls: the batch id is journalled
            assert child.poll() is None
            server.batch.created_event.wait(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
    assert (server.batch.uploads, server.batch.created) == (1, 1)
    server.batch.held = False
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert (server.batch.uploads, server.batch.created) == (1, 1)
    assert len(server.requests) == 1
    assert (root / "tickets/a.md").read_text() == "triaged: Triage inbox/a.txt.\n"


def test_ctrl_c_while_waiting_leaves_the_batch_running_and_says_so(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    child = subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "run", "triage", "--batch"],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.batch.created_event.wait(HANG)
        while server.batch.retrieves == 0:
            assert child.poll() is None
            server.batch.created_event.wait(0.05)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=HANG)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, stderr
    assert "claw: batch batch_fake1 is left running at http://127.0.0.1:" in stderr
    assert "(it is paid for): `claw run --batch` again picks up its results" in stderr
    assert stderr.splitlines()[-1] == "claw: interrupted"
    server.batch.held = False
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert (server.batch.uploads, server.batch.created) == (1, 1)


def test_log_shows_the_batches_and_a_dry_run_says_which_tasks_batch(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    clawfile = FAN_OUT.replace(
        '        output: "tickets/{{ item.stem }}.md"\n',
        '        output: "tickets/{{ item.stem }}.md"\n        batch: true\n',
    )
    root = make_project(tmp_path / "p", clawfile, FILES)
    r = claw(root, "run", "-n", env=env)
    assert r.exit_code == 0, r.stderr
    assert (
        "claw: triage: its model calls would go through the provider's Batch API (batch: true)"
        in r.stderr
    )
    assert "digest: its model calls" not in r.stderr
    assert server.batch.uploads == 0
    assert claw(root, "run", "triage", env=env).exit_code == 0
    r = claw(root, "log", env=env)
    assert "  batches: batch_fake1 (completed, 3 requests)" in r.stdout, r.stdout
    (run,) = json.loads(claw(root, "log", "--json", env=env).stdout)
    assert run["batches"] == ["batch_fake1 (completed, 3 requests)"]


def test_replies_nobody_asked_for_yet_are_kept_redacted(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    key = env["OPENAI_API_KEY"]
    server.handler = lambda body: text(f"the key is {key}")
    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    r = claw(root, "run", "triage", "--batch", "--batch-wait", "1s", env=env)
    assert r.exit_code == 3
    server.batch.held = False
    (root / "inbox/b.txt").unlink()  # the next run asks for a's reply alone
    (root / "inbox/c.txt").unlink()
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    db = sqlite3.connect(root / ".claw/state.db")
    kept = db.execute("SELECT completion FROM batch_requests").fetchall()
    assert len(kept) == 2 and all("the key is [REDACTED]" in k for (k,) in kept)
    db.close()
    data = b"".join(p.read_bytes() for p in (root / ".claw").glob("state.db*"))
    assert key.encode() not in data
    # b's reply is handed over when b comes back, without a batch
    (root / "inbox/b.txt").write_text("B")
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert (server.batch.uploads, len(server.requests)) == (1, 3)
    assert (root / "tickets/b.md").read_text() == "the key is [REDACTED]\n"


@pytest.mark.parametrize("made", [False, True], ids=["not-made", "reply-lost"])
def test_a_run_killed_while_creating_its_batch_never_uploads_again(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], made: bool
) -> None:
    """Killed while the batch was being created: the next run finds the batch the provider
    made (its reply was lost), or creates one from the file already uploaded."""
    server.batch.create_gate = threading.Event()
    server.batch.create_first = made
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    child = subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "run", "triage", "--batch"],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert server.batch.creating.wait(HANG)  # uploaded, and creating its batch
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        gate, server.batch.create_gate = server.batch.create_gate, None
        gate.set()
    assert (server.batch.uploads, server.batch.created) == (1, int(made))
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert (server.batch.uploads, server.batch.created) == (1, 1)
    assert len(server.requests) == 1


def test_a_batch_the_provider_refuses_fails_its_jobs_with_the_reason(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.batch.fail_next = "model gpt-4o-mini is not available for batch"
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    r = claw(root, "run", "triage", "--batch", "-k", env=env)
    assert r.exit_code == 1
    assert "refused batch batch_fake1: model gpt-4o-mini is not available for batch" in r.stderr
    assert not (root / "tickets").exists()


@pytest.mark.parametrize("limit", ["MAX_REQUESTS", "MAX_BYTES"])
def test_a_file_holds_what_the_provider_allows(
    tmp_path: Path,
    server: FakeOpenAI,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    limit: str,
) -> None:
    from claw_batch.llm import batch

    # two requests a file: by count, or by bytes (a line is ~950 bytes: the system prompt)
    monkeypatch.setattr(batch, limit, 2 if limit == "MAX_REQUESTS" else 2000)
    root = make_project(tmp_path / "p", FAN_OUT, {**FILES, "inbox/d.txt": "D"})
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    sizes = sorted(b["request_counts"]["total"] for b in server.batch.batches.values())
    assert sum(sizes) == 4 and max(sizes) <= 2, sizes
    if limit == "MAX_BYTES":
        inputs = [server.batch.files[b["input_file_id"]] for b in server.batch.batches.values()]
        assert all(len(f) <= 2000 for f in inputs)


def test_a_hook_task_cannot_batch(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          review:
            prompt: Review the staged diff.
            check: true
            hook: pre-commit
            batch: true
        """,
    )
    r = claw(root, "validate")
    assert r.exit_code == 2
    assert "clawfile.yaml:7: tasks.review.batch: a task run by a git hook" in r.stderr, r.stderr


def test_a_batch_that_spans_midnight_is_still_re_attached(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """The system prompt's date and daily notes change; the batch's custom_ids do not."""
    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, FILES)
    late = {**env, "CLAW_NOW": "2026-11-22T23:59:00+01:00"}
    r = claw(root, "run", "triage", "--batch", "--batch-wait", "1s", env=late)
    assert r.exit_code == 3, r.stderr
    server.batch.held = False
    next_day = {**env, "CLAW_NOW": "2026-11-23T00:10:00+01:00"}
    r = claw(root, "run", "triage", "--batch", env=next_day)
    assert r.exit_code == 0, r.stderr
    assert (server.batch.uploads, server.batch.created) == (1, 1)
    assert "re-attached to batch batch_fake1" in r.stderr

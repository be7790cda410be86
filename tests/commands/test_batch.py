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
import time
from collections.abc import Callable, Iterator
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


def claw_child(
    root: Path,
    env: dict[str, str],
    *args: str,
    stderr: int = subprocess.DEVNULL,
    text: bool = False,
    own_group: bool = True,
) -> subprocess.Popen[Any]:
    """`claw run ARGS` as a child process; `own_group`: in a process group of its own, so
    that `killed` takes the run and whatever it started."""
    return subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "run", *args],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=text,
        start_new_session=own_group,
    )


def killed(child: subprocess.Popen[Any]) -> None:
    os.killpg(child.pid, signal.SIGKILL)
    child.communicate()


def until(server: FakeOpenAI, child: subprocess.Popen[Any], done: Callable[[], bool]) -> None:
    """Until `done()`, the child still running."""
    while not done():
        assert child.poll() is None
        server.batch.created_event.wait(0.05)


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
    child = claw_child(root, env, "triage", "--batch")
    try:
        assert server.batch.created_event.wait(HANG)
        until(server, child, lambda: server.batch.retrieves > 0)  # polled: its id journalled
    finally:
        killed(child)
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
    child = claw_child(
        root, env, "triage", "--batch", stderr=subprocess.PIPE, text=True, own_group=False
    )
    try:
        assert server.batch.created_event.wait(HANG)
        until(server, child, lambda: server.batch.retrieves > 0)
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
    child = claw_child(root, env, "triage", "--batch")
    try:
        assert server.batch.creating.wait(HANG)  # uploaded, and creating its batch
    finally:
        killed(child)
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
    from claw_batch.llm import batchlines

    # two requests a file: by count, or by bytes (a line is ~950 bytes: the system prompt)
    monkeypatch.setattr(batchlines, limit, 2 if limit == "MAX_REQUESTS" else 2000)
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


THREE = """
    version: 1
    model: gpt-4o-mini
    tasks:
      digest:
        prompt: "Read notes/a.md and notes/b.md and digest them."
        output: digest.md
        tools: [read]
"""


def three(body: dict[str, Any]) -> Reply:
    """Three turns: a read, another read, the answer."""
    reads = sum(m["role"] == "tool" for m in body["messages"])
    if reads < 2:
        return tool_calls(call("read", {"path": f"notes/{'ab'[reads]}.md"}))
    return text("digest")


def finish_held_batches(server: FakeOpenAI) -> None:
    """The provider finishes the batches in flight between two runs."""
    server.batch.held = False
    for batch_id in list(server.batch.batches):
        server.batch.get(f"/v1/batches/{batch_id}")


def test_a_job_killed_in_its_second_round_pays_its_first_round_once(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """The digest's first turn is answered (batch 1), its second is in batch 2 when the run
    is killed: the next run takes turn 1's reply from the journal and re-attaches to batch 2."""

    def holding(body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            server.batch.held = True  # the batch after this one stays in flight
        return answer(body)

    server.handler = holding
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    child = claw_child(root, env, "digest", "--batch")
    try:
        until(server, child, lambda: server.batch.created >= 2 and server.batch.retrieves >= 3)
    finally:
        killed(child)
    assert (server.batch.uploads, server.batch.created) == (2, 2)
    server.handler = answer
    finish_held_batches(server)
    r = claw(root, "run", "digest", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert (server.batch.uploads, server.batch.created, len(server.requests)) == (2, 2, 2)
    db = sqlite3.connect(root / ".claw/state.db")  # the job is done: its replies are not kept
    assert db.execute("SELECT COUNT(*) FROM batch_requests").fetchone() == (0,)


def test_cron_runs_with_batch_wait_finish_a_three_turn_job_paying_each_turn_once(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """README's cron recipe, batches slower than the wait: each run takes the replies of the
    turns before, asks for the next, and submits it as it stops (--batch-wait)."""
    server.handler = three
    root = make_project(tmp_path / "p", THREE, {"notes/a.md": "A", "notes/b.md": "B"})
    codes = []
    for _ in range(8):  # a run may end before the reply of a batch re-attached to comes
        server.batch.held = True
        r = claw(root, "run", "--batch", "--batch-wait", "1s", env=env)
        codes.append(r.exit_code)
        if r.exit_code != 3:
            break
        finish_held_batches(server)
    assert codes[-1] == 0 and set(codes[:-1]) == {3}, r.stderr
    assert (server.batch.uploads, server.batch.created, len(server.requests)) == (3, 3, 3)
    assert (root / "digest.md").read_text() == "digest\n"


def test_a_lost_create_answer_never_makes_a_second_batch(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """POST /batches made the batch, but its answer was a 503 (a proxy timed out): claw looks
    for the batch made from its file before creating another (neither it nor the SDK
    retries the create)."""
    made = server.batch._create

    def lost(body: dict[str, Any]) -> tuple[int, object]:
        status, batch = made(body)
        return (
            (503, {"error": {"message": "upstream timeout"}}) if status == 200 else (status, batch)
        )

    server.batch._create = lost  # type: ignore[method-assign]
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert (server.batch.uploads, server.batch.created, len(server.requests)) == (1, 1, 1)


@pytest.mark.parametrize(
    "bad",
    [
        b'{"custom_id": {"a": 1}, "response": {"status_code": 200, "body": {}}}',
        b'{"custom_id": ["x"], "response": {"status_code": 200}}',
        b'{"custom_id": "ID", "response": {"status_code": "abc", "body": {}}}',
        b'{"custom_id": "ID", "response": {"status_code": 1e999, "body": {}}}',
        b'{"custom_id": "ID", "response": {"status_code": 500, "body": []}}',
        b"[1, 2]",
    ],
    ids=["dict-id", "list-id", "text-status", "huge-status", "list-body", "not-an-object"],
)
def test_a_malformed_output_line_is_skipped(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], bad: bytes
) -> None:
    """A line before the good one that is not a reply claw can read: skipped, and the run
    (and the next) ends as its jobs do, never with a crash."""
    process = server.batch._process

    def garbled(batch: dict[str, Any], *, cancelled: bool = False) -> None:
        process(batch, cancelled=cancelled)
        output = server.batch.files[batch["output_file_id"]]
        cid = json.loads(output.splitlines()[0])["custom_id"].encode()
        server.batch.files[batch["output_file_id"]] = bad.replace(b"ID", cid) + b"\n" + output

    server.batch._process = garbled  # type: ignore[method-assign]
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    for _ in range(2):
        r = claw(root, "run", "triage", "--batch", "--force", env=env)
        assert r.exit_code == 0, r.stderr
        assert (root / "tickets/a.md").read_text() == "triaged: Triage inbox/a.txt.\n"
    db = sqlite3.connect(root / ".claw/state.db")
    assert db.execute("SELECT DISTINCT status FROM batches").fetchall() == [("completed",)]


def test_a_line_missing_from_a_completed_batch_goes_again_at_most_three_times(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from claw_batch.llm import batch

    monkeypatch.setattr(batch, "QUIET", 0.2)
    monkeypatch.setattr(batch, "FIRST_POLL", 0.2)
    process = server.batch._process

    def truncated(batch: dict[str, Any], *, cancelled: bool = False) -> None:
        process(batch, cancelled=cancelled)
        server.batch.files[batch["output_file_id"]] = b"not json at all\n"

    server.batch._process = truncated  # type: ignore[method-assign]
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 1, r.stderr
    assert server.batch.created == 3
    assert "(batch batch_fake3): no reply in its output file file-fake" in r.stderr
    assert "after 3 attempts" in r.stderr


def test_a_file_the_provider_dropped_before_its_batch_was_made_is_uploaded_anew(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """Killed after the upload, before the create; the provider drops the file meanwhile:
    the next run's create is refused for good, and the requests go in a new file."""
    server.batch.create_gate = threading.Event()
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    child = claw_child(root, env, "triage", "--batch")
    try:
        assert server.batch.creating.wait(HANG)
    finally:
        killed(child)
        gate, server.batch.create_gate = server.batch.create_gate, None
        gate.set()
    server.batch.files.clear()  # expired, or deleted
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert "submitted again" in r.stderr
    assert (server.batch.uploads, server.batch.created, len(server.requests)) == (2, 1, 1)


def test_batch_wait_does_not_wait_for_a_poll_the_provider_stalls(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """The provider does not answer a look at the batch: the run ends at its --batch-wait
    all the same, while the look is still in flight."""
    answered = threading.Event()
    release = threading.Event()
    get = server.batch.get

    def stalled(path: str) -> tuple[int, object]:
        if path.startswith("/v1/batches/batch_"):
            release.wait(HANG)
            answered.set()
        return get(path)

    server.batch.get = stalled  # type: ignore[method-assign]
    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    try:
        # the first look comes at ~2.5 s (the quiet window, then FIRST_POLL), and stalls
        r = claw(root, "run", "triage", "--batch", "--batch-wait", "5s", env=env)
        assert not answered.is_set()  # the run did not wait for the stalled look
    finally:
        release.set()
    assert r.exit_code == 3, r.stderr
    assert "is left running" in r.stderr


def test_ctrl_c_while_the_run_submits_its_last_requests_ends_it_in_the_ledger(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """--batch-wait is over while the upload stalls; the run waits for the upload (it is
    journalled), and Ctrl-C then ends it: exit 130, the run recorded interrupted."""
    release = threading.Event()
    uploading = threading.Event()
    post = server.batch.post

    def stalled(path: str, raw: bytes, headers: Any) -> tuple[int, object]:
        if path.rstrip("/") == "/v1/files":
            uploading.set()
            release.wait(HANG)
        return post(path, raw, headers)

    server.batch.post = stalled  # type: ignore[method-assign]
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    child = claw_child(
        root,
        env,
        "triage",
        "--batch",
        "--batch-wait",
        "1s",
        stderr=subprocess.PIPE,
        text=True,
        own_group=False,
    )
    try:
        assert uploading.wait(HANG)
        assert child.stderr is not None
        for line in child.stderr:  # the job stopped waiting: the run is closing
            if line.startswith("limit triage"):
                break
        time.sleep(1.5)  # into the run's close, which waits for the upload
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=HANG)
    finally:
        release.set()
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130
    db = sqlite3.connect(root / ".claw/state.db")
    assert db.execute("SELECT status, exit_code FROM runs").fetchall() == [("interrupted", 130)]


def test_a_batch_id_the_provider_answers_is_redacted_and_stripped(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    key = env["OPENAI_API_KEY"]
    made = server.batch._create

    def named(body: dict[str, Any]) -> tuple[int, object]:
        status, batch = made(body)
        if status == 200:
            assert isinstance(batch, dict)
            batch["id"] = f"batch_{key}\x1b[2J"
        return status, batch

    server.batch._create = named  # type: ignore[method-assign]
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    r = claw(root, "run", "triage", "--batch", env=env)
    assert key not in r.stderr and "\x1b" not in r.stderr
    assert "batch_[REDACTED]" in r.stderr
    state = (root / ".claw/state.db").read_bytes()
    assert key.encode() not in state and b"\x1b[2J" not in state


def test_a_journalled_reply_older_than_two_days_is_not_taken(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    r = claw(root, "run", "triage", "--batch", "--batch-wait", "1s", env=env)
    assert r.exit_code == 3, r.stderr
    finish_held_batches(server)
    later = {**env, "CLAW_NOW": "2026-11-25T23:05:00+01:00"}  # three days on
    r = claw(root, "run", "triage", "--batch", env=later)
    assert r.exit_code == 0, r.stderr
    assert "re-attached" not in r.stderr
    assert (server.batch.uploads, server.batch.created, len(server.requests)) == (2, 2, 2)


def test_batch_wait_submits_what_the_jobs_asked_for_last(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest's second turn is still gathered when --batch-wait is over: the run submits
    it as it ends (the collector has not closed the connections it needs), for the next run."""
    from claw_batch.llm import batch

    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    r = claw(root, "run", "digest", "--batch", "--batch-wait", "1s", env=env)
    assert r.exit_code == 3, r.stderr
    finish_held_batches(server)
    server.batch.held = True
    monkeypatch.setattr(batch, "QUIET", 60.0)  # the second turn waits in the collector
    r = claw(root, "run", "digest", "--batch", "--batch-wait", "3s", env=env)
    assert r.exit_code == 3, r.stderr
    assert (server.batch.uploads, server.batch.created) == (2, 2)
    assert "batch batch_fake2 is left running" in r.stderr
    assert "could not submit" not in r.stderr


def test_a_create_whose_outcome_stays_unknown_keeps_its_file_for_the_next_run(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every create answers 503 and the provider's list cannot be read: the job fails, but
    the file is not forgotten (its batch may exist): the next run looks for it, then creates
    it, and uploads nothing again."""
    from claw_batch.llm import batch

    monkeypatch.setattr(batch, "FIRST_POLL", 0.05)
    post, get = server.batch.post, server.batch.get
    down = True

    def creating(path: str, raw: bytes, headers: Any) -> tuple[int, object]:
        if down and path.rstrip("/") == "/v1/batches":
            return 503, {"error": {"message": "upstream timeout"}}
        return post(path, raw, headers)

    def listing(path: str) -> tuple[int, object]:
        if down and path.startswith("/v1/batches?"):
            return 503, {"error": {"message": "upstream timeout"}}
        return get(path)

    server.batch.post = creating  # type: ignore[method-assign]
    server.batch.get = listing  # type: ignore[method-assign]
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 1, r.stderr
    assert "the batch of file file-fake1 may have been made" in r.stderr
    down = False
    r = claw(root, "run", "triage", "--batch", env=env)
    assert r.exit_code == 0, r.stderr
    assert (server.batch.uploads, server.batch.created, len(server.requests)) == (1, 1, 1)


@pytest.mark.parametrize("cache", [(), ("--no-cache",)], ids=["cache", "no-cache"])
def test_a_forced_job_never_takes_a_journalled_reply(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], cache: tuple[str, ...]
) -> None:
    """-B asks for a new sample (ChatRequest.sample, in the custom_id): the reply a batch
    of the run before returned is not it — with the call cache off too."""
    server.batch.held = True
    root = make_project(tmp_path / "p", FAN_OUT, ONE)
    r = claw(root, "run", "triage", "--batch", "--batch-wait", "1s", *cache, env=env)
    assert r.exit_code == 3, r.stderr
    finish_held_batches(server)
    r = claw(root, "run", "triage", "--batch", "-B", *cache, env=env)
    assert r.exit_code == 0, r.stderr
    assert "re-attached" not in r.stderr
    assert (server.batch.uploads, server.batch.created, len(server.requests)) == (2, 2, 2)

"""When a run sends (`notify:`): one notice per task per run, from its jobs' results in this
run, through the seam's `send` (tests/sendfake.py runs a `command:` delivery for real); the
ledger of sends; what a failed delivery does; --no-notify; -n."""

from __future__ import annotations

import _thread
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, error, text
from helpers import HANG, claw, make_project
from sendfake import FakeSend, preview, received, receiver

from claw_batch.config import Delivery
from claw_batch.notify import send as sending
from claw_batch.notify.notice import Notice

NOW = "2026-11-22T23:05:00+01:00"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "CLAW_NOW": NOW,
    }


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSend:
    """claw_batch.notify.send's two functions, at the seam the run calls them through."""
    found = FakeSend()
    monkeypatch.setattr(sending, "send", found)
    monkeypatch.setattr(sending, "preview", preview)
    return found


def project(tmp_path: Path, on: str, *, command: list[str] | None = None) -> Path:
    got = tmp_path / "got.jsonl"
    target = json.dumps(command or receiver(got))
    return make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: fake-model
        tasks:
          digest:
            prompt: "Digest."
            output: digest.md
            notify:
              - on: {on}
                command: {target}
        """,
    )


def deliveries(root: Path) -> list[tuple[object, ...]]:
    db = sqlite3.connect(root / ".claw" / "state.db")
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'deliveries'").fetchall():
            return []
        return db.execute(
            "SELECT task, target, event, ok, attempts, error FROM deliveries ORDER BY rowid"
        ).fetchall()
    finally:
        db.close()


def test_a_task_that_ends_ok_sends_one_notice_with_its_outcome(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    root = project(tmp_path, "[ok]")
    server.enqueue(text("# Digest\nAll quiet.", usage=(100, 20)))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    [got] = received(tmp_path / "got.jsonl")
    assert got["task"] == "digest" and got["status"] == "ok" and got["event"] == "ok"
    assert got["counts"] == {"ok": 1} and got["jobs"] == 1 and got["failures"] == []
    assert got["output"] == "digest.md" and got["excerpt"] == "# Digest\nAll quiet.\n"
    assert got["tokens"] == 120 and got["show"] == "claw show digest"
    assert got["project"] == "p" and got["run_id"].startswith("20261122-") and not got["tainted"]
    assert deliveries(root) == [("digest", f"command {sys_exe()}", "ok", 1, 1, None)]


def sys_exe() -> str:
    import sys

    return sys.executable


def test_an_up_to_date_rerun_sends_nothing_again(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    root = project(tmp_path, "[always]")
    server.enqueue(text("All quiet."))
    assert claw(root, "run", env=env).exit_code == 0
    assert claw(root, "run", env=env).exit_code == 0  # up to date: no job ran
    assert len(received(tmp_path / "got.jsonl")) == 1
    assert len(deliveries(root)) == 1


def test_changed_fires_only_when_the_output_differs_from_the_last_delivered(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    root = project(tmp_path, "[changed]")
    server.enqueue(text("one"), text("one"), text("two"))
    for _ in range(3):
        assert claw(root, "run", "-B", env=env).exit_code == 0
    got = received(tmp_path / "got.jsonl")
    assert [(g["event"], g["excerpt"]) for g in got] == [("changed", "one\n"), ("changed", "two\n")]


def test_a_failed_delivery_is_said_once_recorded_and_changes_no_result(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    failing = [sys_exe(), "-c", "import sys; sys.exit('no route to host')"]
    root = project(tmp_path, "[ok, changed]", command=failing)
    server.enqueue(text("one"), text("one"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0  # the job's result, whatever the delivery did
    warning = (
        f"claw: warning: digest: notify command {sys_exe()} failed after 3 attempts: "
        "exit 1: no route to host"
    )
    assert r.stderr.count(warning) == 1, r.stderr
    assert deliveries(root) == [
        ("digest", f"command {sys_exe()}", "ok", 0, 3, "exit 1: no route to host")
    ]
    log = claw(root, "log")
    assert (
        f"  notify failed digest: command {sys_exe()} (ok) after 3 attempts: "
        "exit 1: no route to host"
    ) in log.stdout
    as_json = json.loads(claw(root, "log", "--json").stdout)
    assert as_json[0]["deliveries"][0]["ok"] is False
    # The same output again: never delivered, so `changed` still fires.
    assert claw(root, "run", "-B", env=env).exit_code == 0
    assert [row[2] for row in deliveries(root)] == ["ok", "ok"]


def test_a_fan_out_sends_one_notice_with_its_counts_and_failures(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    got = tmp_path / "got.jsonl"
    root = make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: fake-model
        tasks:
          review:
            foreach: "tickets/*.md"
            prompt: "Review {{{{ item }}}}."
            output: "out/{{{{ item }}}}.out"
            notify:
              - on: [failed]
                command: {json.dumps(receiver(got))}
        """,
        {"tickets/a.md": "a", "tickets/b.md": "b", "tickets/c.md": "c"},
    )
    server.enqueue(text("fine"), error(400, "bad request"), text("fine"))
    r = claw(root, "run", "-k", env=env)
    assert r.exit_code == 1
    [notice] = received(got)
    assert notice["status"] == "failed" and notice["event"] == "failed"
    assert notice["counts"] == {"ok": 2, "failed": 1} and notice["jobs"] == 3
    [failure] = notice["failures"]
    assert failure["item"].startswith("tickets/") and failure["status"] == "failed"
    assert notice["show"] == "claw show review"


def test_no_notify_sends_nothing_and_records_nothing(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    root = project(tmp_path, "[always]")
    server.enqueue(text("All quiet."))
    assert claw(root, "run", "--no-notify", env=env).exit_code == 0
    assert received(tmp_path / "got.jsonl") == [] and fake.sent == []
    assert deliveries(root) == []


def test_a_dry_run_says_what_would_be_sent_to_whom(
    tmp_path: Path, env: dict[str, str], fake: FakeSend
) -> None:
    root = project(tmp_path, "[failed, limit]")
    r = claw(root, "run", "-n", env=env)
    assert r.exit_code == 0, r.stderr
    assert (
        f"claw: digest: would notify on failed, limit: command {sys_exe()}: digest ok"
    ) in r.stderr
    assert fake.sent == [] and not (root / ".claw" / "state.db").exists()


def test_a_scheduled_run_sends_as_any_run_does(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    root = project(tmp_path, "[ok]")
    clawfile = root / "clawfile.yaml"
    clawfile.write_text(
        clawfile.read_text().replace("    prompt:", '    schedule: "* * * * *"\n    prompt:')
    )
    server.enqueue(text("All quiet."))
    r = claw(root, "run", "--due", env=env)
    assert r.exit_code == 0, r.stderr
    assert [g["task"] for g in received(tmp_path / "got.jsonl")] == ["digest"]


def test_sending_does_not_hold_the_scheduler(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    """a's notice is held until b's is sent, and b runs after a: a send that held the
    scheduler would never let b start."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        defaults:
          notify:
            - {on: [ok], webhook: "https://hooks.example.org/x"}
        tasks:
          a: {prompt: "A.", output: a.md}
          b: {prompt: "B.", output: b.md, needs: [a]}
        """,
    )
    b_sent = threading.Event()
    waited: list[bool] = []

    def hold(delivery: Delivery, notice: Notice) -> None:
        if notice.task == "a":
            waited.append(b_sent.wait(HANG))
        else:
            b_sent.set()

    fake.before = hold
    server.enqueue(text("A"), text("B"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    assert waited == [True]
    assert sorted(n.task for _, n in fake.sent) == ["a", "b"]


def test_ctrl_c_while_waiting_for_a_send_stops_waiting_and_records_nothing(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    root = project(tmp_path, "[ok]")
    started, release = threading.Event(), threading.Event()

    def hang(delivery: Delivery, notice: Notice) -> None:
        started.set()
        release.wait(HANG)

    fake.before = hang

    def interrupt() -> None:
        if started.wait(HANG):
            _thread.interrupt_main()

    threading.Thread(target=interrupt, daemon=True).start()
    server.enqueue(text("All quiet."))
    try:
        r = claw(root, "run", env=env)
    finally:
        release.set()
    assert r.exit_code == 130, r.stderr
    assert (root / "digest.md").read_text() == "All quiet.\n"  # the job's result stays
    assert deliveries(root) == []


def test_the_notify_secrets_join_the_redactor(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    secret = "https://hooks.example.org/services/T000/B000/s3cr3t-w3bh00k"
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        tasks:
          digest:
            prompt: "Digest {{ read('notes.md') }}."
            output: digest.md
            notify:
              - {on: [always], url_env: SLACK_HOOK}
              - {on: [always], webhook: "https://chat.example.org/hooks/l1t3r4l-t0k3n"}
        """,
        {"notes.md": f"hook: {secret} and https://chat.example.org/hooks/l1t3r4l-t0k3n\n"},
    )
    server.enqueue(text(f"Posted to {secret}"))
    r = claw(root, "run", env={**env, "SLACK_HOOK": secret})
    assert r.exit_code == 0, r.stderr
    sent = json.dumps(server.requests)
    assert secret not in sent and "l1t3r4l-t0k3n" not in sent
    written = "".join(p.read_text() for p in (root / ".claw").rglob("*.jsonl"))
    written += (root / "digest.md").read_text()
    assert secret not in written and "l1t3r4l-t0k3n" not in written
    assert all(secret not in n.excerpt for _, n in fake.sent)
    assert len(fake.sent) == 2


def test_a_notice_quoting_an_output_made_from_outside_content_says_it_is_tainted(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    got = tmp_path / "got.jsonl"
    root = make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: fake-model
        tasks:
          triage:
            prompt: "Triage this file:\\n{{{{ read(item.path) }}}}"
            watch: ["inbox/*.txt"]
            output: "out/{{{{ item.stem }}}}.md"
            notify:
              - on: [ok]
                command: {json.dumps(receiver(got))}
        """,
        {"inbox/a.txt": "A stranger's mail.\n"},
    )
    server.enqueue(text("Spam."))
    r = claw(root, "run", "triage", env=env)
    assert r.exit_code == 0, r.stderr
    [notice] = received(got)
    assert notice["tainted"] is True and notice["item"] == "inbox/a.txt"
    assert notice["show"] == "claw show 'triage[inbox/a.txt]'"


def test_changed_on_a_fan_out_compares_every_items_output(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str], fake: FakeSend
) -> None:
    """A rerun of one item whose answer came out the same changed no output: `changed` does
    not fire (the items that did not run count with their recorded results); one whose
    answer differs does."""
    got = tmp_path / "got.jsonl"
    root = make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: fake-model
        tasks:
          review:
            foreach: "tickets/*.md"
            prompt: "Review {{{{ item }}}}: {{{{ read(item.path) }}}}"
            output: "out/{{{{ item }}}}.out"
            notify:
              - on: [changed]
                command: {json.dumps(receiver(got))}
        """,
        {"tickets/a.md": "a", "tickets/b.md": "b", "tickets/c.md": "c"},
    )
    answers: dict[str, str] = {}  # an answer when the prompt holds its key, else "first"
    server.handler = lambda body: text(
        next((a for item, a in answers.items() if item in str(body)), "first")
    )
    assert claw(root, "run", env=env).exit_code == 0
    assert [g["jobs"] for g in received(got)] == [3]
    (root / "tickets/b.md").write_text("b, edited")  # b reruns: "first" again
    assert claw(root, "run", env=env).exit_code == 0
    assert [g["jobs"] for g in received(got)] == [3]
    (root / "tickets/c.md").write_text("c, edited")  # c reruns: another answer
    answers["c, edited"] = "second"
    assert claw(root, "run", env=env).exit_code == 0
    assert [(g["event"], g["jobs"]) for g in received(got)] == [("changed", 3), ("changed", 1)]
    (root / "tickets/a.md").write_text("a, edited")  # a reruns: "first" again
    assert claw(root, "run", env=env).exit_code == 0
    assert len(received(got)) == 2

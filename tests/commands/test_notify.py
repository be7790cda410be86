"""`claw notify test TASK`: a sample notice through each of the task's deliveries, now."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import Result, make_project
from sendfake import FakeSend, preview, received, receiver

from claw_batch.cli import main
from claw_batch.notify import send as sending


def notify_test(root: Path, task: str, env: dict[str, str] | None = None) -> Result:
    """`claw notify test -C ROOT TASK`, in-process."""
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        args = ["notify", "test", "-C", str(root), task]
        r = CliRunner().invoke(main, args, catch_exceptions=False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Result(r.exit_code, r.stdout, r.stderr)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSend:
    found = FakeSend()
    monkeypatch.setattr(sending, "send", found)
    monkeypatch.setattr(sending, "preview", preview)
    return found


def project(tmp_path: Path) -> Path:
    got = tmp_path / "got.jsonl"
    return make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: fake-model
        tasks:
          nightly:
            prompt: "Night."
            notify:
              - on: [failed]
                command: {json.dumps(receiver(got))}
              - on: [always]
                url_env: SLACK_HOOK
                format: slack
          quiet:
            prompt: "Hush."
        """,
    )


def test_it_sends_a_sample_through_each_delivery_and_says_how_each_went(
    tmp_path: Path, fake: FakeSend
) -> None:
    root = project(tmp_path)
    r = notify_test(root, "nightly", env={"SLACK_HOOK": "https://hooks.example/x"})
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"ok  command {sys.executable}\nok  webhook $SLACK_HOOK\n"
    [got] = received(tmp_path / "got.jsonl")
    assert got["sample"] is True and got["status"] == "ok" and got["task"] == "nightly"
    assert not (root / ".claw" / "state.db").exists()  # nothing recorded


def test_one_delivery_that_fails_exits_1_naming_it(tmp_path: Path, fake: FakeSend) -> None:
    root = project(tmp_path)
    r = notify_test(root, "nightly")  # SLACK_HOOK unset
    assert r.exit_code == 1
    assert r.stdout == (
        f"ok  command {sys.executable}\nfailed  webhook $SLACK_HOOK: SLACK_HOOK is not set\n"
    )


def test_an_unknown_task_or_one_without_notify_is_a_usage_error(
    tmp_path: Path, fake: FakeSend
) -> None:
    root = project(tmp_path)
    r = notify_test(root, "nightlly")
    assert r.exit_code == 2
    assert r.stderr == "claw: unknown task 'nightlly' (tasks: nightly, quiet)\n"
    r = notify_test(root, "quiet")
    assert r.exit_code == 2
    assert r.stderr.startswith("claw: task 'quiet' has no notify: deliveries; add one under")
    assert "command: [notify-send, claw]" in r.stderr
    assert fake.sent == []

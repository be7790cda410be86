"""`notify:` end to end: `claw run` against the fake model, its notices delivered through
the real targets (claw_batch.notify.send) to real servers on 127.0.0.1: an HTTP receiver, an
SMTP server (aiosmtpd) with a login, and a command. No fake at any seam."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, text
from helpers import claw, claw_process, make_project
from receivers import HttpReceiver, Silent, SmtpServer

HOOK_PATH = "/services/T000/B000/hook-secret-0123456789"
PASSWORD = "smtp-pass-9f8e7d6c5b4a"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def env_for(server: FakeOpenAI, **more: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "CLAW_NOW": "2026-11-22T23:05:00+01:00",
        **more,
    }


def every_target(tmp_path: Path, smtp_port: int) -> Path:
    dump = (
        "import os, sys; open(os.path.join(os.environ['CLAW_PROJECT'], 'got.json'), 'a')"
        ".write(sys.stdin.read() + '\\n')"
    )
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
              - on: [ok]
                url_env: HOOK_URL
                format: slack
              - on: always
                email:
                  to: [ops@example.org]
                  from: claw@example.org
                  smtp: {{host: 127.0.0.1, port: {smtp_port}, user_env: SMTP_USER,
                         password_env: SMTP_PASSWORD}}
              - on: [changed]
                command: [{json.dumps(sys.executable)}, -c, {json.dumps(dump)}]
        """,
    )


def deliveries(root: Path) -> list[tuple[object, ...]]:
    db = sqlite3.connect(root / ".claw" / "state.db")
    try:
        return db.execute("SELECT target, event, ok FROM deliveries ORDER BY rowid").fetchall()
    finally:
        db.close()


def test_a_run_delivers_to_each_real_target_once_and_an_up_to_date_rerun_sends_nothing(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    with HttpReceiver() as hook, SmtpServer(login=("claw", PASSWORD)) as smtp:
        root = every_target(tmp_path, smtp.port)
        env = env_for(
            server, HOOK_URL=hook.url(HOOK_PATH), SMTP_USER="claw", SMTP_PASSWORD=PASSWORD
        )
        server.enqueue(text("All quiet: 3 notes, no risks."))
        r = claw(root, "run", env=env)
        assert r.exit_code == 0, r.stderr
        assert "warning" not in r.stderr

        # The webhook: Slack's shape, once, at the path the variable holds.
        assert [q.path for q in hook.requests] == [HOOK_PATH]
        slack = json.loads(hook.requests[0].body)
        assert slack["text"].startswith("claw: digest ok")
        assert "All quiet" in json.dumps(slack)
        # The e-mail: logged in with the variables' login, the output in the body.
        assert smtp.logins == ["claw"]
        [mail] = smtp.mails
        assert mail.rcpt_tos == ["ops@example.org"]
        assert b"Subject: claw: digest ok" in mail.content
        assert b"All quiet: 3 notes, no risks." in mail.content
        # The command: the payload as JSON on its stdin, told where the project is.
        [payload] = [json.loads(line) for line in (root / "got.json").read_text().splitlines()]
        shown = (payload["task"], payload["status"], payload["output"])
        assert shown == ("digest", "ok", "digest.md")
        assert deliveries(root) == [
            ("webhook $HOOK_URL", "ok", 1),
            ("email ops@example.org", "ok", 1),
            ("command " + sys.executable, "changed", 1),
        ]
        # No secret the deliveries used is anywhere claw wrote or printed.
        written = b"".join(p.read_bytes() for p in (root / ".claw").rglob("*") if p.is_file())
        for secret in (HOOK_PATH, PASSWORD):
            assert secret.encode() not in written
            assert secret not in r.stderr + r.stdout

        # Up to date: nothing runs, nothing is sent again.
        again = claw(root, "run", env=env)
        assert again.exit_code == 0
        assert (len(hook.requests), len(smtp.mails)) == (1, 1)
        assert len(deliveries(root)) == 3

        # Run again (-B) with the same answer: ok and always send; changed does not.
        server.enqueue(text("All quiet: 3 notes, no risks."))
        assert claw(root, "run", "-B", env=env).exit_code == 0
        assert (len(hook.requests), len(smtp.mails)) == (2, 2)
        assert len((root / "got.json").read_text().splitlines()) == 1


def test_a_webhook_that_fails_is_retried_recorded_and_said_once_and_the_run_still_succeeds(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    with HttpReceiver([500]) as hook:
        root = make_project(
            tmp_path / "p",
            f"""
            version: 1
            model: fake-model
            tasks:
              digest:
                prompt: "Digest."
                output: digest.md
                notify:
                  - on: [ok]
                    webhook: {hook.url()}
                    retries: 1
            """,
        )
        server.enqueue(text("done"))
        r = claw(root, "run", env=env_for(server))
    assert r.exit_code == 0
    assert len(hook.requests) == 2  # the first attempt and one retry
    warning = "claw: warning: digest: notify webhook 127.0.0.1 failed after 2 attempts: "
    assert r.stderr.count(warning) == 1, r.stderr
    assert deliveries(root) == [("webhook 127.0.0.1", "ok", 0)]
    assert "notify failed digest: webhook 127.0.0.1" in claw(root, "log").stdout


def test_a_webhook_that_never_answers_is_cut_at_its_timeout(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    with Silent() as silent:
        root = make_project(
            tmp_path / "p",
            f"""
            version: 1
            model: fake-model
            tasks:
              digest:
                prompt: "Digest."
                notify:
                  - on: always
                    webhook: http://127.0.0.1:{silent.port}/hook
                    timeout: 0.5
                    retries: 0
            """,
        )
        server.enqueue(text("done"))
        r = claw(root, "run", env=env_for(server))
    assert r.exit_code == 0
    assert "timed out" in r.stderr
    assert deliveries(root) == [("webhook 127.0.0.1", "ok", 0)]


def test_claw_notify_test_sends_a_sample_through_each_real_target(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    with HttpReceiver() as hook, SmtpServer(login=("claw", PASSWORD)) as smtp:
        root = every_target(tmp_path, smtp.port)
        env = env_for(
            server, HOOK_URL=hook.url(HOOK_PATH), SMTP_USER="claw", SMTP_PASSWORD=PASSWORD
        )
        r = claw_process(root, "notify", "test", "digest", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert len(hook.requests) == 1 and len(smtp.mails) == 1
        [payload] = [json.loads(line) for line in (root / "got.json").read_text().splitlines()]
        assert payload["sample"] is True
        assert server.requests == []  # no model was asked
        # An unset variable: that delivery fails, naming it; the others still go.
        env["HOOK_URL"] = ""
        r = claw_process(root, "notify", "test", "digest", env=env)
    assert r.returncode == 1
    assert "HOOK_URL" in r.stdout + r.stderr
    assert len(smtp.mails) == 2

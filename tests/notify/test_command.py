"""The command target, real processes: the payload on stdin, a scrubbed environment (no
provider key, no SMTP password, no webhook URL, whatever the caller's holds), the project's
project told by CLAW_PROJECT while it runs in a folder of its own (nothing a job planted in
the project is on its path), and its failures: an exit code, a hang (killed with its children), a
program that is not there."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from notices import FANOUT_FAILED, command, keep

from claw_batch.config import Delivery
from claw_batch.notify.send import Sent, send
from claw_batch.notify.shapes import json_body
from claw_batch.safety.redact import Redactor

PY = sys.executable
CALLER = {
    "PATH": os.environ["PATH"],
    "HOME": "/home/someone",
    "OPENAI_API_KEY": "sk-test-0123456789abcdefghijklmnop",
    "SMTP_PASSWORD": "correct horse battery",
    "SLACK_HOOK": "https://hooks.slack.com/services/T0/B0/secret",
}


def deliver(delivery: Delivery, project: Path | None = None) -> tuple[Sent, list[float]]:
    waits: list[float] = []
    sent = send(
        delivery, FANOUT_FAILED, environ=CALLER, redact=keep, sleep=waits.append, project=project
    )
    return sent, waits


# Writes what it got where the project is (CLAW_PROJECT).
TO_PROJECT = (
    "import json, os, sys; p = os.environ['CLAW_PROJECT']; json.dump({}, open(p + '/{}', 'w'))"
)


def test_the_payload_on_stdin_told_where_the_project_is(tmp_path: Path) -> None:
    script = TO_PROJECT.format("[os.getcwd(), os.listdir('.'), sys.stdin.read()]", "got")
    sent, _ = deliver(command(PY, "-c", script), project=tmp_path)
    assert sent == Sent(f"command {PY}", True, 1)
    folder, listed, stdin = json.loads((tmp_path / "got").read_text())
    assert folder != str(tmp_path) and listed == []  # a fresh empty folder of its own
    assert not Path(folder).exists()  # and gone after
    assert json.loads(stdin) == json_body(FANOUT_FAILED)


def test_a_module_planted_in_the_project_is_not_imported(tmp_path: Path) -> None:
    """`python -c` puts its folder first on the import path: the project's `json.py` (a job
    may write one) is not there to be imported, nor a script's folder (PYTHONSAFEPATH)."""
    (tmp_path / "json.py").write_text("raise SystemExit('the planted json.py ran')\n")
    (tmp_path / "notify.py").write_text(
        "import json, os, sys\nopen(os.environ['CLAW_PROJECT'] + '/got', 'w').write('ok')\n"
    )
    sent, _ = deliver(command(PY, "-c", "import json, sys; json.loads(sys.stdin.read())"), tmp_path)
    assert sent.ok, sent.error
    assert deliver(command(PY, "notify.py"), project=tmp_path)[0].ok
    assert (tmp_path / "got").read_text() == "ok"


def test_a_relative_path_is_the_projects_and_a_dot_in_path_finds_nothing(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts/notify.py").write_text(
        "import os, sys\nopen(os.environ['CLAW_PROJECT'] + '/got', 'w').write(sys.argv[1])\n"
    )
    sent, _ = deliver(command(PY, "scripts/notify.py", "a word"), project=tmp_path)
    assert sent.ok, sent.error
    assert (tmp_path / "got").read_text() == "a word"
    planted = tmp_path / "notify-send"
    planted.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\n")
    planted.chmod(0o755)
    environ = {**CALLER, "PATH": f".:{CALLER['PATH']}"}
    send(command("notify-send"), FANOUT_FAILED, environ=environ, redact=keep, project=tmp_path)
    assert not (tmp_path / "ran").exists()


def test_the_environment_holds_no_secret_of_the_callers(tmp_path: Path) -> None:
    script = TO_PROJECT.format("dict(os.environ)", "env")
    assert deliver(command(PY, "-c", script), project=tmp_path)[0].ok
    env = json.loads((tmp_path / "env").read_text())
    assert "OPENAI_API_KEY" not in env and "SMTP_PASSWORD" not in env
    assert "SLACK_HOOK" not in env
    assert not any(value in json.dumps(env) for value in list(CALLER.values())[2:])
    assert env["PATH"] == CALLER["PATH"] and env["HOME"] == "/home/someone"


def test_also_when_the_callers_own_environment_holds_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-process-0123456789abcdefgh")
    delivery = command(PY, "-c", TO_PROJECT.format("dict(os.environ)", "env"))
    assert send(delivery, FANOUT_FAILED, environ=os.environ, redact=keep, project=tmp_path).ok
    assert "OPENAI_API_KEY" not in json.loads((tmp_path / "env").read_text())


def test_a_non_zero_exit_quotes_the_first_line_of_stderr() -> None:
    script = "import sys; print('\\n  no route to the bus\\nmore', file=sys.stderr); sys.exit(3)"
    sent, waits = deliver(command(PY, "-c", script, retries=1))
    assert sent == Sent(f"command {PY}", False, 2, f"command {PY}: exit 3: no route to the bus")
    assert waits == [1.0]


def test_the_error_is_redacted() -> None:
    secret = "hunter2-hunter2-hunter2"
    script = f"import sys; print('password {secret}', file=sys.stderr); sys.exit(1)"
    sent = send(
        command(PY, "-c", script, retries=0),
        FANOUT_FAILED,
        environ={},
        redact=Redactor([secret]),
    )
    assert sent.error == f"command {PY}: exit 1: password [REDACTED]"


def test_a_signal() -> None:
    sent, _ = deliver(command("sh", "-c", "kill -TERM $$", retries=0))
    assert sent.error == "command sh: killed by SIGTERM"


def test_a_hung_command_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $! > {pids}; wait"
    sent, _ = deliver(command("sh", "-c", script, timeout=0.5, retries=0))
    assert sent == Sent("command sh", False, 1, "command sh: timed out after 0.5 s (killed)")
    child = int(pids.read_text())
    assert gone(child)


def gone(pid: int) -> bool:
    """Whether `pid` has ended (a zombie waiting for a reaper that never comes has too)."""
    for _ in range(200):  # a killed process takes a moment to be reaped by init
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_program_that_is_not_there_is_not_retried() -> None:
    sent, waits = deliver(command("claw-no-such-program", "--flag"))
    assert sent == Sent(
        "command claw-no-such-program",
        False,
        1,
        "command claw-no-such-program: not found (not a file, nor a program on PATH)",
    )
    assert waits == []


def test_a_program_that_does_not_read_its_stdin() -> None:
    assert deliver(command("true"))[0] == Sent("command true", True, 1)

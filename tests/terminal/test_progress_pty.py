"""End to end: a real `claw run -j 4` on a pseudo-terminal, against the fake server. The
live area appears, and what stays on the screen at the end is the finished jobs and the
table: no area, no half-erased rows, the cursor shown — after Ctrl-C too."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, hang, text, tool_calls
from helpers import make_project
from vt100 import Terminal

FAN_OUT = """
    version: 1
    model: fake-model
    tasks:
      triage:
        foreach: "inbox/*.txt"
        prompt: "Triage {{ item.path }}."
        output: "out/{{ item.stem }}.txt"
        tools: [read]
"""
SIZE = (100, 30)
SECONDS = re.compile(r"\d+\.\d s\b")


class Pty:
    """A child process on a pseudo-terminal of SIZE, and everything it wrote."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        columns, rows = SIZE
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True
        )
        os.close(slave)
        self.output = b""

    def read_until(self, done: Callable[[str], bool]) -> None:
        """Read until `done(output so far)` or the child closes the terminal."""
        while not done(self.text):
            select.select([self.master], [], [], 1.0)
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the child has gone and the terminal is closed
                return
            if not chunk:
                return
            self.output += chunk

    def finish(self) -> int:
        self.read_until(lambda _: False)
        os.close(self.master)
        return self.proc.wait(timeout=30)

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def claw_on_a_terminal(root: Path, server: FakeOpenAI, *args: str) -> Pty:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "CLAW_NOW": "2026-11-22T23:05:00+01:00",
        "TERM": "xterm",
    }
    return Pty([sys.executable, "-m", "claw_batch", *args], root, env)


def read_then_answer(body: dict[str, Any]) -> Reply:
    prompt = body["messages"][1]["content"]
    if any(m["role"] == "tool" for m in body["messages"]):
        return text(f"done: {prompt}")
    return tool_calls(call("read", {"path": prompt.split()[1].rstrip(".")}))


def screen_of(output: str) -> Terminal:
    terminal = Terminal(*SIZE)
    terminal.feed(output.replace("\r\n", "\n"))  # the terminal's ONLCR, undone
    return terminal


def test_the_live_area_appears_and_the_screen_ends_clean(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    root = make_project(tmp_path / "p", FAN_OUT, {f"inbox/{i}.txt": "help\n" for i in range(6)})
    server.handler = read_then_answer
    run = claw_on_a_terminal(root, server, "run", "-j", "4")
    assert run.finish() == 0, run.text
    assert "\033[?25l" in run.text and " running · " in run.text  # the area was drawn
    screen = screen_of(run.text)
    assert screen.cursor_visible
    job_lines, table = SECONDS.sub("<t> s", screen.text()).split("\n\n")
    assert sorted(job_lines.splitlines()) == [
        f"✓ triage[inbox/{i}.txt] (<t> s, 30 tokens → out/{i}.txt)" for i in range(6)
    ]
    assert table == ("task    ok  failed  tokens   time\ntriage   6       -     180  <t> s\n")


def test_ctrl_c_leaves_the_screen_clean(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", FAN_OUT, {f"inbox/{i}.txt": "help\n" for i in range(6)})
    server.handler = lambda body: hang(30)
    run = claw_on_a_terminal(root, server, "run", "-j", "4")
    run.read_until(lambda out: "4 running" in out)  # the four jobs wait for the model
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.text
    screen = screen_of(run.text)
    assert screen.cursor_visible
    job_lines, table = SECONDS.sub("<t> s", screen.text()).split("\n\n")
    assert len(job_lines.splitlines()) == 4
    for line in job_lines.splitlines():
        assert re.fullmatch(
            r"■ triage\[inbox/\d\.txt\] \(<t> s, 0 tokens\): interrupted \(Ctrl-C or SIGTERM\)",
            line,
        )
    assert table == (
        "task    ok  failed  interrupted  tokens   time\n"
        "triage   -       -            4       -  <t> s\n"
        "claw: interrupted\n"
    )

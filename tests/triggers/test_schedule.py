"""`claw schedule`: the foreground loop over a fake clock, and SIGTERM on the real command."""

from __future__ import annotations

import datetime as dt
import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zoneinfo
from pathlib import Path

from fake_openai import FakeOpenAI, text
from helpers import make_project

from claw_batch.clawfile.load import load_project
from claw_batch.run.runner import RunOptions
from claw_batch.terminal.progress import Progress
from claw_batch.triggers.due import DueSlots
from claw_batch.triggers.schedule import Clock, serve

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      nightly:
        prompt: "Summarise {{ now }}"
        output: "nightly/{{ today }}.md"
        schedule: "0 23 * * *"
        tz: Europe/Berlin
        tools: []
      sixhourly:
        prompt: "Check {{ now }}"
        output: check.md
        schedule: "0 */6 * * *"
        tz: Europe/Berlin
        tools: []
"""


class FakeClock:
    def __init__(self, start: dt.datetime) -> None:
        self.at = start
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.at += dt.timedelta(seconds=seconds)


def test_a_day_of_the_foreground_loop(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    fake = FakeClock(dt.datetime(2026, 11, 22, 0, 0, tzinfo=BERLIN))
    stream = io.StringIO()
    with FakeOpenAI() as server:
        server.handler = lambda body: text(f"done: {body['messages'][1]['content']}")
        environ = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        code = serve(
            load_project(root, None),
            RunOptions(select=DueSlots()),
            progress=Progress(stream),
            environ=environ,
            clock=Clock(lambda: fake.at, fake.sleep, pinned=True),
            until=dt.datetime(2026, 11, 23, 0, 0, tzinfo=BERLIN) - dt.timedelta(seconds=1),
        )
        prompts = [r["messages"][1]["content"] for r in server.requests]
    assert code == 0
    assert prompts == [
        "Check 2026-11-22T00:00:00+01:00",
        "Check 2026-11-22T06:00:00+01:00",
        "Check 2026-11-22T12:00:00+01:00",
        "Check 2026-11-22T18:00:00+01:00",
        "Summarise 2026-11-22T23:00:00+01:00",
    ]
    # it slept from slot to slot (each run takes no fake time), never polling in between
    assert fake.sleeps == [6 * 3600.0] * 3 + [5 * 3600.0]
    with sqlite3.connect(root / ".claw" / "state.db") as db:  # what `claw log` names them by
        assert {t for (t,) in db.execute("SELECT trigger FROM runs")} == {"schedule"}
    log = stream.getvalue().splitlines()
    assert log[0] == "claw schedule: 2 scheduled tasks: nightly, sixhourly"
    assert "claw: nightly: first slot: next at 2026-11-22 23:00 Europe/Berlin" in log
    # Issue 16 (new users): between runs it says what it waits for, as claw shows times.
    assert [line for line in log if line.startswith("claw schedule: next")] == [
        "claw schedule: next slot 2026-11-22 06:00 Europe/Berlin (sixhourly)",
        "claw schedule: next slot 2026-11-22 12:00 Europe/Berlin (sixhourly)",
        "claw schedule: next slot 2026-11-22 18:00 Europe/Berlin (sixhourly)",
        "claw schedule: next slot 2026-11-22 23:00 Europe/Berlin (nightly)",
    ]


def test_sigterm_stops_claw_schedule_cleanly(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        'version: 1\ntasks:\n  yearly: {prompt: "hi", output: y.md, schedule: "0 0 1 1 *"}\n',
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "schedule"],
        cwd=root,
        env={**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-x"},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    assert child.stderr.readline() == "claw schedule: 1 scheduled task: yearly\n"
    assert child.stderr.readline().startswith("claw: yearly: first slot: next at ")
    new_year = dt.datetime(dt.datetime.now().year + 1, 1, 1).astimezone()  # no tz: the machine's
    assert (
        child.stderr.readline() == f"claw schedule: next slot {new_year:%Y-%m-%d %H:%M} (yearly)\n"
    )
    time.sleep(1.0)  # past its first look at the ledger, asleep until next New Year
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=10) == 0
    with child.stderr:
        assert "claw schedule: stopped" in child.stderr.read()

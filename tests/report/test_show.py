"""`claw show`: a run's transcripts, under a line that says when the run started, what
started it and the command as typed (issue 16, points 10 and 11)."""

from __future__ import annotations

import json
from pathlib import Path

from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      nightly:
        prompt: "Nightly"
        output: nightly.md
        schedule: "0 23 * * *"
        tz: Europe/Berlin
        tools: []
"""


def test_show_says_when_and_how_the_run_started(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done")
        env = {
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-x",
            "CLAW_NOW": "2026-11-23T23:00:00+01:00",
        }
        assert claw(root, "run", "--due", env=env).exit_code == 0
    shown = claw(root, "show", "last")
    assert shown.exit_code == 0, shown.stderr
    first, second = shown.stdout.splitlines()[:2]
    assert first.startswith("run 20261123-230000-")
    assert second == f"started 2026-11-23 23:00 by cron: claw run -C {root} --due"


BY_HAND = """
    version: 1
    model: fake-model
    tasks:
      notes:
        prompt: "Notes"
        output: notes.md
        tools: []
"""


def test_show_last_is_the_last_run_that_ran_a_job(tmp_path: Path) -> None:
    """A run with everything up to date ran nothing to show: `last` is the run before it."""
    root = make_project(tmp_path / "p", BY_HAND)
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done")
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        assert claw(root, "run", env=env).exit_code == 0
        assert claw(root, "run", env=env).stderr == "1 job up to date\n"
    runs = json.loads(claw(root, "log", "--json").stdout)
    idle, ran = runs[0]["id"], runs[1]["id"]
    assert (runs[0]["jobs"], len(runs[1]["jobs"])) == ([], 1)
    last, by_id = claw(root, "show", "last"), claw(root, "show", ran)
    assert (last.exit_code, last.stderr) == (0, "")
    assert last.stdout == by_id.stdout
    assert last.stdout.startswith(f"run {ran}\n")
    idle_run = claw(root, "show", idle)  # in the ledger, with nothing to show
    assert (idle_run.exit_code, idle_run.stdout.splitlines()[2:]) == (
        0,
        ["(no job ran: everything was up to date)"],
    )

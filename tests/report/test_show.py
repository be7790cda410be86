"""`claw show`: a run's transcripts, under a line that says when the run started, what
started it and the command as typed (issue 16, points 10 and 11)."""

from __future__ import annotations

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

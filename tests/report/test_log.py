"""`claw log`: the ledger read back for a person, or as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from fake_openai import FakeOpenAI, Reply, text
from helpers import claw, make_project

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      notes:
        prompt: "Summarise"
        output: notes.md
        tools: []
      tickets:
        foreach: "inbox/*.txt"
        prompt: "Ticket {{ item.path }}"
        output: "tickets/{{ item.stem }}.md"
        tools: []
"""


def reply(body: dict[str, object]) -> Reply:
    prompt = str(body["messages"][1]["content"])  # type: ignore[index]
    return text("" if "b.txt" in prompt else "done")  # an empty answer fails that job


def test_the_log_shows_what_ran_and_how_it_ended(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, {"inbox/a.txt": "A\n", "inbox/b.txt": "B\n"})
    assert claw(root, "log").stderr == "claw: no runs yet\n"
    with FakeOpenAI() as server:
        server.handler = reply
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        first = claw(root, "run", "-k", env={**env, "CLAW_NOW": "2026-11-20T23:00:00+01:00"})
        assert first.exit_code == 1
        second = claw(root, "run", env={**env, "CLAW_NOW": "2026-11-22T23:00:00+01:00"})
        assert second.exit_code == 1  # b.txt fails again

    shown = claw(root, "log")
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("2026-11-20 23:00  failed")
    assert any(
        line.split()[:2] == ["ok", "notes"] and line.endswith("→ notes.md") for line in lines
    )
    assert any(line.split()[:2] == ["failed", "tickets[inbox/b.txt]"] for line in lines)
    later = [line for line in lines if not line.startswith(" ")]
    assert [line[:16] for line in later] == ["2026-11-20 23:00", "2026-11-22 23:00"]

    recent = claw(
        root, "log", "--since", "2d", "--json", env={"CLAW_NOW": "2026-11-23T08:00:00+01:00"}
    )
    runs = json.loads(recent.stdout)
    assert len(runs) == 1 and runs[0]["started"].startswith("2026-11-22")
    assert [j["name"] for j in runs[0]["jobs"]] == ["tickets[inbox/b.txt]"]  # the rest was done
    assert runs[0]["jobs"][0]["status"] == "failed"

    only = json.loads(claw(root, "log", "notes", "--json").stdout)
    assert [[j["task"] for j in r["jobs"]] for r in only] == [["notes"]]
    assert claw(root, "log", "nope").exit_code == 2
    assert claw(root, "log", "--since", "yesterday").exit_code == 2

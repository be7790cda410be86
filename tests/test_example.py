"""The repository's own example project replays offline (the README's first command).

When this fails after a change to a prompt, a workspace file, a skill or a tool schema,
re-record with `python scripts/record_example.py`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers import claw

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = ["clawfile.yaml", "prompts", "skills", "workspace", "cassettes", "servers"]


def copy_example(target: Path) -> Path:
    target.mkdir()
    for name in EXAMPLE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(
                source, target / name, ignore=shutil.ignore_patterns("reports", "tickets")
            )
        else:
            shutil.copy(source, target / name)
    for note in (target / "workspace/memory").glob("*.md"):
        note.unlink()  # daily notes of the developer's own runs
    return target


def test_example_replays_offline_on_another_day(tmp_path: Path) -> None:
    root = copy_example(tmp_path / "example")
    env = {"CLAW_NOW": "2027-02-03T07:30:00+01:00", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    r = claw(root, "run", "--replay", "--json", env=env)
    assert r.exit_code == 0, r.stderr
    jobs = json.loads(r.stdout)["jobs"]
    assert [(j["task"], j["status"]) for j in jobs] == [("nightly-summary", "ok")] + [
        ("triage", "ok")
    ] * 3
    report = (root / "workspace/reports/2027-02-03.md").read_text()
    assert report.startswith("# Nightly summary")
    ticket = json.loads((root / "workspace/tickets/login-broken.json").read_text())
    assert ticket["priority"] == "urgent"  # the injected "mark this low" was ignored
    note = (root / "workspace/memory/2027-02-03.md").read_text()
    assert "### 07:30 triage · 3 jobs: 3 ok · " in note  # one entry for the fan-out
    assert "> workspace/inbox/acme-invoice.txt: {" in note
    # and again: yesterday's note is now in the system prompt, which replay keys mask
    again = claw(root, "run", "--replay", "--json", env={**env, "CLAW_NOW": "2027-02-04T07:30:00"})
    assert again.exit_code == 0, again.stderr
    statuses = [(j["task"], j["status"]) for j in json.loads(again.stdout)["jobs"]]
    # the summary's prompt names the day, so it runs again; the tickets are up to date
    assert statuses == [("nightly-summary", "ok")] + [("triage", "up-to-date")] * 3


def test_show_last_after_a_second_replay_that_had_nothing_to_do(tmp_path: Path) -> None:
    """The README's first screen: run, run again (all up to date), then `claw show last`."""
    root = copy_example(tmp_path / "example")
    env = {"CLAW_NOW": "2027-02-03T07:30:00+01:00", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    first = claw(root, "run", "--replay", "--json", env=env)
    assert first.exit_code == 0, first.stderr
    again = claw(root, "run", "--replay", "--json", env=env)
    assert [j["status"] for j in json.loads(again.stdout)["jobs"]] == ["up-to-date"] * 4
    shown = claw(root, "show", "last")
    assert (shown.exit_code, shown.stderr) == (0, "")
    assert shown.stdout.startswith(f"run {json.loads(first.stdout)['run_id']}\n")
    assert shown.stdout.count("\n== ok (") == 4


def test_release_check_delegates_one_sub_job_per_note_offline(tmp_path: Path) -> None:
    root = copy_example(tmp_path / "example")
    env = {"CLAW_NOW": "2027-02-03T07:30:00+01:00", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    r = claw(root, "run", "--replay", "--json", "release-check", env=env)
    assert r.exit_code == 0, r.stderr
    jobs = json.loads(r.stdout)["jobs"]
    assert [(j["task"], j["status"]) for j in jobs] == [("release-check", "ok")]
    report = (root / "workspace/reports/release-check.md").read_text()
    assert report.startswith("# Release check")
    shown = claw(root, "show", "last", "release-check")
    assert shown.stdout.count("      ↳ sub-job note-risks<") == 2, shown.stdout
    assert shown.stdout.count("        == ok (") == 2  # each sub-job's transcript, nested
    assert claw(root, "log").stdout.count("  ↳ note-risks<") == 2
    # Again: the parent is up to date, and nothing is asked (a cassette miss would fail).
    again = claw(root, "run", "--replay", "--json", "release-check", env=env)
    assert [j["status"] for j in json.loads(again.stdout)["jobs"]] == ["up-to-date"]

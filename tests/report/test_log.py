"""`claw log`: the ledger read back for a person, or as JSON."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
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


# --- what started a run, and the command as typed (issue 16, point 10) -----------------------

SCHEDULED = """
    version: 1
    model: fake-model
    tasks:
      notes:
        prompt: "Summarise"
        output: notes.md
        tools: []
      nightly:
        prompt: "Nightly"
        output: nightly.md
        schedule: "0 23 * * *"
        tools: []
"""
RUN_ID = re.compile(r"\[(\d{8}-\d{6})-[0-9a-f]{6}\]")
JOB_SECONDS = re.compile(r"\b\d+\.\d s\b(?= +\d)")  # a job's real duration


def run_process(root: Path, argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(
        argv, cwd=root, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_log_shows_the_command_as_typed_and_what_started_the_run(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", SCHEDULED)
    python_m = [sys.executable, "-m", "claw_batch"]
    script = [str(Path(sys.executable).parent / "claw")]  # the venv's console script
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done")
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        at = {"CLAW_NOW": "2026-11-20T10:00:00+01:00"}
        run_process(root, [*python_m, "run", "-j", "4", "notes"], {**env, **at})
        at = {"CLAW_NOW": "2026-11-20T11:00:00+01:00"}
        run_process(root, [*script, "run", "-j", "4", "-B", "notes"], {**env, **at})
        at = {"CLAW_NOW": "2026-11-20T23:00:00+01:00", "TZ": "Europe/Berlin"}
        run_process(root, [*python_m, "run", "--due"], {**env, **at})

    shown = subprocess.run([*script, "log"], cwd=root, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    page = RUN_ID.sub(r"[\1-xxxxxx]", shown.stdout)
    page = JOB_SECONDS.sub(lambda m: "D s".rjust(len(m[0])), page)
    assert page == (
        "2026-11-20 10:00  ok          hand     claw run -j 4 notes, 0.0 s, 15 tokens, $?"
        "  [20261120-100000-xxxxxx]\n"
        "  ok          notes      D s        15 tok        $?  → notes.md\n"
        "2026-11-20 11:00  ok          hand     claw run -j 4 -B notes, 0.0 s, 15 tokens, $?"
        "  [20261120-110000-xxxxxx]\n"
        "  ok          notes      D s        15 tok        $?  → notes.md\n"
        "2026-11-20 23:00  ok          cron     claw run --due, 0.0 s, 15 tokens, $?"
        "  [20261120-230000-xxxxxx]\n"
        "  ok          nightly      D s        15 tok        $?  → nightly.md\n"
    )
    runs = json.loads(claw(root, "log", "--json").stdout)
    assert [(r["trigger"], r["command"]) for r in runs] == [
        ("cron", "claw run --due"),
        ("hand", "claw run -j 4 -B notes"),
        ("hand", "claw run -j 4 notes"),
    ]


def test_a_ledger_from_before_the_trigger_column_still_opens(tmp_path: Path) -> None:
    """A state.db of an older claw: no `trigger` column, no `jobs.remembered`, the
    interpreter's path in argv. claw log reads it as it is (read-only), naming the trigger
    from the command; a run then adds the columns and goes on."""
    root = make_project(tmp_path / "p", CLAWFILE, {"inbox/a.txt": "A\n"})
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done")
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        assert claw(root, "run", env=env).exit_code == 0
        db = sqlite3.connect(root / ".claw" / "state.db")
        with db:
            db.execute("ALTER TABLE runs DROP COLUMN trigger")
            db.execute("ALTER TABLE jobs DROP COLUMN remembered")
            db.execute("UPDATE runs SET argv = '/home/u/.venv/bin/claw run --due -j 4'")
        db.close()
        assert "claw run --due -j 4" in claw(root, "log").stdout
        [old] = json.loads(claw(root, "log", "--json").stdout)
        assert (old["trigger"], old["command"]) == ("cron", "claw run --due -j 4")
        assert [job["remembered"] for job in old["jobs"]] == [None, None]
        assert claw(root, "show", "last").stdout.startswith(f"run {old['id']}\n")
        assert claw(root, "report").exit_code == 0
        assert "claw run --due -j 4</div>" in (root / ".claw" / "report.html").read_text()
        assert claw(root, "run", "-B", env=env).exit_code == 0
    runs = json.loads(claw(root, "log", "--json").stdout)
    assert [r["trigger"] for r in runs] == ["hand", "cron"]
    assert runs[0]["command"] == f"claw run -C {root} -B"


# --- cached prompt tokens (issue 18, part 3) ------------------------------------------------


def test_cached_prompt_tokens_are_shown_per_job_and_in_totals(tmp_path: Path) -> None:
    """What the provider served from its prefix cache (part of the prompt tokens, cheaper):
    `--json`, `claw log` and `claw log --json` show it beside the tokens."""
    root = make_project(tmp_path / "p", CLAWFILE, {"inbox/a.txt": "A\n", "inbox/b.txt": "B\n"})
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done", usage=(1000, 10), cached=768)
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        ran = claw(root, "run", "-j", "1", "tickets", "--json", env=env)
    assert ran.exit_code == 0, ran.stderr
    envelope = json.loads(ran.stdout)
    assert [j["cached_tokens"] for j in envelope["jobs"]] == [768, 768]
    assert (envelope["totals"]["tokens"], envelope["totals"]["cached_tokens"]) == (2020, 1536)

    lines = claw(root, "log").stdout.splitlines()
    run_id = envelope["run_id"]  # fake-model has no price: $?
    assert lines[0].endswith(f", 2,020 tokens, $?, 1,536 cached  [{run_id}]"), lines[0]
    assert all("1,010 tok" in line and " 768 cached " in line for line in lines[1:]), lines
    (run,) = json.loads(claw(root, "log", "--json").stdout)
    assert [j["cached_tokens"] for j in run["jobs"]] == [768, 768]
    shown = claw(root, "show", "last").stdout  # and each call's, in the transcript
    assert shown.count("assistant (step 1, 1,010 tokens, 768 cached):") == 2, shown


def test_no_cached_tokens_no_mention(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done")
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        ran = claw(root, "run", "notes", "--json", env=env)
    assert json.loads(ran.stdout)["totals"]["cached_tokens"] == 0
    assert not re.search(r"\d cached", claw(root, "log").stdout)


def test_reading_the_ledger_leaves_claw_as_it_was(tmp_path: Path) -> None:
    """`claw log`, `claw show` and `claw report` only read: after a run closed its ledger,
    they leave no -wal/-shm files beside it (as a dry run does not)."""
    root = make_project(tmp_path / "p", CLAWFILE, {"inbox/a.txt": "A\n"})
    with FakeOpenAI() as server:
        server.handler = reply
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        assert claw(root, "run", env=env).exit_code == 0
    before = sorted(p.name for p in (root / ".claw").iterdir())
    assert "state.db-wal" not in before
    page = str(tmp_path / "r.html")  # not in the working directory: the tests run in the repo
    for argv in (["log"], ["log", "--json", "notes"], ["show", "last"], ["report", "-o", page]):
        assert claw(root, *argv).exit_code == 0, argv
        assert sorted(p.name for p in (root / ".claw").iterdir()) == before, argv


# --- the node a job ran on (issue 20) -------------------------------------------------------


def test_a_ledger_from_before_the_node_column_still_opens(tmp_path: Path) -> None:
    """A state.db of a claw before --executor ray: no `jobs.node`. claw log, show and report
    read it as it is (read-only: no node, no node column); a run then adds the column."""
    root = make_project(tmp_path / "p", CLAWFILE, {"inbox/a.txt": "A\n"})
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done")
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        assert claw(root, "run", env=env).exit_code == 0
        db = sqlite3.connect(root / ".claw" / "state.db")
        with db:
            db.execute("ALTER TABLE jobs DROP COLUMN node")
        db.close()
        shown = claw(root, "log")
        assert shown.exit_code == 0 and "→ notes.md" in shown.stdout, shown.stderr
        [old] = json.loads(claw(root, "log", "--json").stdout)
        assert [job["node"] for job in old["jobs"]] == [None, None]
        assert claw(root, "show", "last").exit_code == 0
        assert claw(root, "report").exit_code == 0
        db = sqlite3.connect(root / ".claw" / "state.db")
        assert "node" not in {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        db.close()
        assert claw(root, "run", "-B", env=env).exit_code == 0
    db = sqlite3.connect(root / ".claw" / "state.db")
    assert db.execute("SELECT node FROM jobs ORDER BY rowid").fetchall() == [(None,)] * 4
    db.close()
    runs = json.loads(claw(root, "log", "--json").stdout)
    assert [[job["node"] for job in run["jobs"]] for run in runs] == [[None, None]] * 2

"""The quick check (plan.quickcheck.TaskKey): a job whose task key, item and outputs have not
changed is up to date by stat keys alone; every change the full fingerprint sees still
reruns what it should."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, echo_prompt
from helpers import claw, make_project

DAY1 = "2026-11-22T10:00:00+01:00"
DAY2 = "2026-11-23T10:00:00+01:00"

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      tickets:
        foreach: "inbox/*.txt"
        inputs: [rules.md]
        prompt: prompts/ticket.md
        output: "tickets/{{ item.stem }}.txt"
        tools: [read]
"""
FILES = {
    "inbox/a.txt": "alpha\n",
    "inbox/b.txt": "beta\n",
    "rules.md": "Be kind.\n",
    "prompts/ticket.md": "Ticket for {{ item.path }} ({{ inputs | join(', ') }})\n",
}


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        srv.handler = echo_prompt
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": DAY1}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "p", CLAWFILE, FILES)


def run(root: Path, env: dict[str, str], *args: str) -> dict[str, str]:
    r = claw(root, "run", "--json", *args, env=env)
    assert r.exit_code == 0, r.stderr
    return {j["item"]: j["status"] for j in json.loads(r.stdout)["jobs"]}


def seals(root: Path) -> dict[str, str | None]:
    with sqlite3.connect(root / ".claw" / "state.db") as db:
        return dict(db.execute("SELECT item, quick FROM done").fetchall())


BOTH_OK = {"inbox/a.txt": "ok", "inbox/b.txt": "ok"}
BOTH_UP = {"inbox/a.txt": "up-to-date", "inbox/b.txt": "up-to-date"}


def test_a_noop_reads_no_template_and_imports_no_validator(
    project: Path, env: dict[str, str]
) -> None:
    assert run(project, env) == BOTH_OK
    assert run(project, env) == BOTH_UP  # writes the validated-clawfile cache
    code = (
        "import sys\n"
        "from claw_batch.cli import main\n"
        "try:\n"
        "    main(['run'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "print(sorted(m for m in ('jinja2', 'pydantic', 'yaml', 'openai', 'claw_batch.run.job')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stderr == "2 jobs up to date\n"
    assert done.stdout.strip() == "[]"


def test_every_change_still_reruns_what_it_should(project: Path, env: dict[str, str]) -> None:
    assert run(project, env) == BOTH_OK
    sealed = seals(project)
    assert all(sealed.values())
    assert run(project, env) == BOTH_UP

    a = project / "inbox/a.txt"
    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 10**9))  # touched: same bytes
    assert run(project, env) == BOTH_UP
    assert seals(project)["inbox/a.txt"] != sealed["inbox/a.txt"]  # resealed with the new stat
    assert run(project, env) == BOTH_UP

    out = project / "tickets/b.txt"
    data = out.read_bytes()
    out.unlink()
    out.write_bytes(data)  # a new inode, the same bytes
    assert run(project, env) == BOTH_UP

    a.write_text("alpha, changed\n")
    assert run(project, env) == {"inbox/a.txt": "ok", "inbox/b.txt": "up-to-date"}

    for change in (
        lambda: (project / "rules.md").write_text("Be brief.\n"),  # a shared input
        lambda: (project / "workspace/AGENTS.md").write_text("# Agents\nBe terse.\n"),
        lambda: (project / "prompts/ticket.md").write_text("Ticket: {{ item.path }}\n"),
    ):
        change()
        assert run(project, env) == BOTH_OK
        assert run(project, env) == BOTH_UP
    assert run(project, env, "--model", "other-model") == BOTH_OK

    (project / "tickets/a.txt").write_text("edited by hand\n")
    (project / "tickets/b.txt").unlink()
    assert run(project, env, "--model", "other-model") == {
        "inbox/a.txt": "modified",
        "inbox/b.txt": "ok",
    }


def test_a_task_that_reads_the_clock_takes_the_full_check(
    tmp_path: Path, env: dict[str, str]
) -> None:
    clawfile = CLAWFILE.replace("prompts/ticket.md", '"{{ today }}: {{ item.path }}"')
    root = make_project(tmp_path / "p", clawfile, FILES)
    assert run(root, env) == BOTH_OK
    assert set(seals(root).values()) == {None}
    assert run(root, env) == BOTH_UP
    assert run(root, {**env, "CLAW_NOW": DAY2}) == BOTH_OK


def test_a_state_db_from_before_the_quick_check(project: Path, env: dict[str, str]) -> None:
    assert run(project, env) == BOTH_OK
    with sqlite3.connect(project / ".claw" / "state.db") as db:
        db.execute("DROP INDEX done_quick")  # made with the column, after it
        db.execute("ALTER TABLE done DROP COLUMN quick")
    plan = claw(project, "plan", env=env)  # read-only: the old file stays as it is
    assert plan.exit_code == 0, plan.stderr
    assert "would run" not in plan.stderr
    assert run(project, env) == BOTH_UP  # the full check; it seals the jobs
    assert all(seals(project).values())
    assert run(project, env) == BOTH_UP


def test_included_templates_and_jobs_that_rewrite_their_item_take_the_full_check(
    tmp_path: Path, env: dict[str, str]
) -> None:
    include = CLAWFILE.replace(
        "prompts/ticket.md", "\"Ticket {{ item.path }}\\n{% include 'prompts/guide.md' %}\""
    )
    root = make_project(tmp_path / "inc", include, {**FILES, "prompts/guide.md": "Be kind.\n"})
    assert run(root, env) == BOTH_OK
    assert set(seals(root).values()) == {None}
    (root / "prompts/guide.md").write_text("Be brief.\n")
    assert run(root, env) == BOTH_OK  # the included file is part of the prompt

    in_place = CLAWFILE.replace('"tickets/{{ item.stem }}.txt"', '"{{ item.path }}"')
    root = make_project(tmp_path / "inplace", in_place, FILES)
    assert run(root, env) == BOTH_OK  # each job rewrote its own item
    assert set(seals(root).values()) == {None}
    assert run(root, env) == BOTH_OK  # its input changed: the full check says so


def test_a_task_checked_whole_still_sees_one_changed_job(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A task whose jobs all pass the quick check is settled in one pass (Decider.sealed_outputs);
    one item rewritten with as many bytes in the same second, or one output removed — the last
    job's, the pass's last look — still reruns that job, and only it."""
    items = {f"inbox/{n:02}.txt": f"item {n}\n" for n in range(12)}
    root = make_project(tmp_path / "p", CLAWFILE, {**FILES, **items})
    names = [*items, *BOTH_OK]  # inbox/b.txt is the last job
    assert run(root, env) == dict.fromkeys(names, "ok")
    up = dict.fromkeys(names, "up-to-date")
    assert run(root, env) == up

    last = root / "inbox/b.txt"
    before = last.stat()
    last.write_text("BETA\n")  # as many bytes, rewritten in place: the same inode
    os.utime(last, ns=(before.st_atime_ns, before.st_mtime_ns + 1))  # within the same second
    after = last.stat()
    assert (after.st_size, after.st_ino) == (before.st_size, before.st_ino)
    assert after.st_mtime_ns // 10**9 == before.st_mtime_ns // 10**9
    assert run(root, env) == {**up, "inbox/b.txt": "ok"}
    assert run(root, env) == up

    (root / "tickets/b.txt").unlink()
    assert run(root, env) == {**up, "inbox/b.txt": "ok"}
    assert run(root, env) == up

    # As many jobs as seals, in the same places, the last one another file now: renamed, so
    # with the inode, size and time the seal has
    os.rename(root / "inbox/b.txt", root / "inbox/c.txt")
    del up["inbox/b.txt"]
    assert run(root, env) == {**up, "inbox/c.txt": "ok"}

"""A declared output that a job's bash replaced with a symlink (issue 14): refused as `output`
is, by the same check, before anything there is hashed, recorded or written; and a symlink
found later in an output's place is never followed to hash what it points at.

The model obeys an attacker: its bash call links `out/extra.txt` (an extra `outputs:` entry)
to a host file. Real `claw run`, real bubblewrap.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import claw, make_project

from claw_batch.run.job import REPLAYED_FAILURE
from claw_batch.sandbox import bubblewrap as sandbox

UNAVAILABLE = sandbox.unavailable(os.geteuid() == 0)
if UNAVAILABLE and not os.environ.get("CI"):  # CI installs bubblewrap: there it must work
    pytest.skip(f"no sandbox here: {UNAVAILABLE}", allow_module_level=True)

CLAWFILE = """
    version: 1
    model: m
    tasks:
      t:
        prompt: Write the report and its data.
        output: out/report.md
        outputs: [out/extra.txt]
        tools: [bash]
        permissions: {bash: true}
"""
HOST_FILE = "a host file's content\n"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def run(root: Path, server: FakeOpenAI, command: str) -> dict[str, object]:
    """One `claw run` whose model runs `command`, then answers; its one job's result."""
    server.enqueue(tool_calls(call("bash", {"command": command})), text("done"))
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
    r = claw(root, "run", "--json", env=env)
    (job,) = json.loads(r.stdout)["jobs"]
    assert r.exit_code == (0 if job["status"] == "ok" else 1), r.stderr
    return dict(job)


def ledger(root: Path) -> str:
    with sqlite3.connect(root / ".claw" / "state.db") as db:
        return "\n".join(db.iterdump())


def host_file(tmp_path: Path) -> Path:
    path = tmp_path / "host" / "secret.txt"
    path.parent.mkdir()
    path.write_text(HOST_FILE)
    return path


@pytest.mark.parametrize("target", ["host file", "/etc/hostname", "the clawfile"])
def test_an_extra_output_linked_out_fails_the_job(
    tmp_path: Path, server: FakeOpenAI, target: str
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE).resolve()
    link = {
        "host file": str(host_file(tmp_path)),
        "/etc/hostname": "/etc/hostname",
        "the clawfile": "../clawfile.yaml",
    }[target]
    (root / "out").mkdir()
    if not os.path.exists(os.path.join(root, "out", link)):
        pytest.skip(f"no {link} here")
    real = os.path.realpath(root / "out" / link)
    content = Path(real).read_bytes()
    command = f"ln -sf {link} out/extra.txt"
    why = (
        f"refused writing out/extra.txt: it resolves to {real}, outside the project root "
        f"{root}; use paths inside the project"
        if target != "the clawfile"
        else "refused: writing out/extra.txt (resolves to clawfile.yaml) is not permitted; "
        "this task may write only: out/report.md, out/extra.txt"
    )
    for replayed in ("", REPLAYED_FAILURE):  # the next run is not up to date: it fails again
        job = run(root, server, command)
        assert (job["status"], job["error"]) == ("failed", f"output out/extra.txt: {why}{replayed}")
    assert len(server.requests) == 2  # the second run replayed the first's (the call cache)
    assert not (root / "out/report.md").exists()  # the job's own output was not written
    with sqlite3.connect(root / ".claw" / "state.db") as db:
        assert db.execute("SELECT path FROM files").fetchall() == []  # nothing hashed there
        assert db.execute("SELECT * FROM done").fetchall() == []
    assert hashlib.sha256(content).hexdigest() not in ledger(root)


def test_an_output_found_linked_out_is_not_hashed_through_the_link(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """A job that succeeded; then its extra output is a symlink to a host file (another
    job's bash, any local process). The next run does not follow it to hash that file: the
    output counts as missing, and the job runs again."""
    root = make_project(tmp_path / "p", CLAWFILE)
    outside = host_file(tmp_path)
    assert run(root, server, "mkdir -p out && echo data > out/extra.txt")["status"] == "ok"
    (root / "out/extra.txt").unlink()
    (root / "out/extra.txt").symlink_to(outside)
    job = run(root, server, "rm out/extra.txt && echo data > out/extra.txt")
    assert (job["status"], job["reasons"]) == ("ok", ["output out/extra.txt is missing"])
    assert hashlib.sha256(outside.read_bytes()).hexdigest() not in ledger(root)

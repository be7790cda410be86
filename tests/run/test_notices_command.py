"""A notify `command:` runs outside the sandbox, with the owner's rights: nothing a job writes
may become what it runs. The files it names (and a named file's folder) are kept from every
job, as an MCP server's code is; it runs in a fresh empty folder, so a module or a program a
job planted in the project is not on its path; `claw validate` warns of a write glob that
reaches what it names."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import claw, make_project

PY = json.dumps(sys.executable)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def env_for(server: FakeOpenAI) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "CLAW_NOW": "2026-11-22T23:05:00+01:00",
    }


def tidy(tmp_path: Path) -> Path:
    """A task whose write glob covers the script its notice runs."""
    return make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: fake-model
        tasks:
          tidy:
            prompt: "Tidy the scripts."
            tools: [write]
            permissions: {{write: ["scripts/**"]}}
            output: out/tidy.md
            notify:
              - on: always
                command: [{PY}, scripts/notify.py]
        """,
        {
            "scripts/notify.py": (
                "import os, sys\n"
                "open(os.environ['CLAW_PROJECT'] + '/got.json', 'w').write(sys.stdin.read())\n"
            )
        },
    )


def test_a_job_cannot_rewrite_the_script_its_notice_runs(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    marker = tmp_path / "escaped"
    root = tidy(tmp_path)
    before = (root / "scripts/notify.py").read_text()
    evil = f"open({str(marker)!r}, 'w').write('ran outside the sandbox')\n"
    server.enqueue(
        tool_calls(
            call("write", {"path": "scripts/notify.py", "content": evil}),
            call("write", {"path": "scripts/json.py", "content": evil}),
        ),
        text("tidied"),
    )
    r = claw(root, "run", "tidy", env=env_for(server))
    assert r.exit_code == 0, r.stderr
    assert not marker.exists(), "the job's code ran unsandboxed as the notify command"
    assert (root / "scripts/notify.py").read_text() == before
    assert not (root / "scripts/json.py").exists()
    assert json.loads((root / "got.json").read_text())["task"] == "tidy"  # it ran, from scripts/


def test_a_job_cannot_plant_a_module_the_notify_command_imports(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """`python -c` puts its working folder first on the import path: were it the project, a
    job allowed to write *.py at the root would plant json.py there for it to import."""
    marker = tmp_path / "escaped"
    line = "import json, sys; json.loads(sys.stdin.read())"
    root = make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: fake-model
        tasks:
          gen:
            prompt: "Generate helpers."
            tools: [write]
            permissions: {{write: ["*.py"]}}
            output: out/gen.md
            notify:
              - on: always
                command: [{PY}, -c, {json.dumps(line)}]
        """,
    )
    evil = f"open({str(marker)!r}, 'w').write('ran outside the sandbox')\nloads = len\n"
    server.enqueue(
        tool_calls(call("write", {"path": "json.py", "content": evil})),
        text("generated"),
    )
    r = claw(root, "run", "gen", env=env_for(server))
    assert r.exit_code == 0, r.stderr
    assert (root / "json.py").exists()  # the job may write it: nothing imports it
    assert not marker.exists(), "a module the job wrote ran unsandboxed in the notify command"
    assert "notify" not in r.stderr  # delivered


def test_validate_warns_of_a_write_glob_that_reaches_a_notify_command(tmp_path: Path) -> None:
    root = tidy(tmp_path)
    r = claw(root, "validate", "-q")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == (
        "claw: clawfile.yaml:7: tasks.tidy.permissions.write[0]: warning: 'scripts/**' reaches "
        "the code of the notify command of task 'tidy' (scripts), which no job may write: it "
        "grants the rest\n"
    )

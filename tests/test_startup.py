"""What a command imports before its work: a real child process, its `sys.modules` read after
the command ran (as bench/startup.py checks `openai`). The validators (pydantic, jsonschema,
croniter) are for a clawfile that changed, a task with a `schema:`, cron work: a plain run
and a listing of an unchanged project pay for none of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, text
from helpers import make_project

# Runs the CLI in-process, then prints which of the named modules it loaded, on its last line.
PROBE = """
import json, sys
from claw_batch.cli import main
try:
    main(sys.argv[2:], prog_name="claw")
except SystemExit:
    pass
print("\\n" + json.dumps([m for m in json.loads(sys.argv[1]) if m in sys.modules]))
"""
# The same, printing which thread first imported each of the named modules.
IMPORTERS = """
import json, sys, threading
from claw_batch.cli import main
names, seen = json.loads(sys.argv[1]), {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in names:
            seen.setdefault(name, threading.current_thread().name)
sys.meta_path.insert(0, Watch())
try:
    main(sys.argv[2:], prog_name="claw")
except SystemExit:
    pass
print("\\n" + json.dumps(seen))
"""
VALIDATORS = ("croniter", "jsonschema", "pydantic")

# A plain task beside one with a schedule and a schema: validating the file imports all three.
CLAWFILE = """
version: 1
model: fake-model
tasks:
  plain:
    description: Says hi
    prompt: "say hi"
    output: out/hi.md
  nightly:
    description: Scheduled, with a schema
    prompt: "a ticket"
    output: out/ticket.json
    schedule: "0 23 * * *"
    schema:
      type: object
      required: [title]
      properties: {title: {type: string}}
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def probe(
    script: str, root: Path, args: Sequence[str], env: dict[str, str], names: Sequence[str]
) -> Any:
    """What `script` (PROBE, IMPORTERS) printed last, run as a child in `root`."""
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(list(names)), *args],
        cwd=root,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def loaded(root: Path, args: Sequence[str], env: dict[str, str], names: Sequence[str]) -> list[str]:
    return list(probe(PROBE, root, args, env, names))


def importers(
    root: Path, args: Sequence[str], env: dict[str, str], names: Sequence[str]
) -> dict[str, str]:
    """Which thread imported each of `names` that the command imported."""
    return dict(probe(IMPORTERS, root, args, env, names))


def fake_env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-0123"}


def test_claw_list_of_an_unchanged_project_imports_no_validator(tmp_path: Path) -> None:
    # The first listing validates and keeps the result (making .claw/ for it): the next
    # one reads it, and imports none of them, nor YAML, nor Jinja2 for jobs that never ran.
    root = make_project(tmp_path / "p", CLAWFILE)
    first = loaded(root, ["list"], {}, VALIDATORS)
    assert first == list(VALIDATORS)
    assert loaded(root, ["list"], {}, (*VALIDATORS, "yaml", "jinja2")) == []


def test_claw_plan_writes_the_cache_into_an_existing_dot_claw(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    loaded(root, ["plan"], {}, VALIDATORS)
    assert not (root / ".claw").exists()  # `claw plan nope` leaves no trace in a new project
    (root / ".claw").mkdir()
    assert loaded(root, ["plan"], {}, VALIDATORS) == list(VALIDATORS)
    assert loaded(root, ["plan", "plain"], {}, ("croniter", "jsonschema")) == []


def test_a_plain_run_imports_neither_croniter_nor_jsonschema(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    assert loaded(root, ["list"], {}, ()) == []  # the cache
    server.enqueue(text("hi"))
    assert loaded(root, ["run", "-q", "plain"], fake_env(server), VALIDATORS[:2]) == []
    assert (root / "out/hi.md").read_text() == "hi\n"


def test_a_plain_run_sends_its_first_request_without_pydantic(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """The tools' validators are pydantic's: loaded on the warm-up thread, which starts once
    the first request has left (claw_batch.startup), or by the first tool call, never before
    the first request. The run may end before the warm-up got to them."""
    root = make_project(tmp_path / "p", CLAWFILE)
    assert loaded(root, ["list"], {}, ()) == []
    server.enqueue(text("hi"))
    run = ["run", "-q", "plain"]
    assert set(importers(root, run, fake_env(server), ("pydantic",)).values()) <= {"claw-warmup"}


def test_a_listing_loads_nothing_for_model_calls(tmp_path: Path) -> None:
    """`claw list` and `claw plan` call no model: neither the HTTP client nor the worker
    processes' module (subprocess pipes, pickle) is theirs to load."""
    root = make_project(tmp_path / "p", CLAWFILE)
    calls = ("claw_batch.llm.workers", "claw_batch.llm.transport")
    for command in (["list"], ["list"], ["plan"]):
        assert loaded(root, command, {}, calls) == []


def test_a_plain_run_loads_neither_cassettes_nor_the_schedule(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """Recording and replaying, and --due's slots, are modules of the runs that ask for them."""
    root = make_project(tmp_path / "p", CLAWFILE)
    assert loaded(root, ["list"], {}, ()) == []
    server.enqueue(text("hi"))
    names = ("claw_batch.llm.cassette", "claw_batch.triggers.due", "claw_batch.triggers.cron")
    assert loaded(root, ["run", "-q", "plain"], fake_env(server), names) == []


def test_a_run_that_runs_no_command_loads_no_sandbox(tmp_path: Path, server: FakeOpenAI) -> None:
    """Bubblewrap (ctypes, the seccomp filter, the mount plan) is made at a job's first bash
    call. (Not zoneinfo: pydantic imports it, and the warm-up may have imported pydantic.)"""
    root = make_project(tmp_path / "p", CLAWFILE)
    assert loaded(root, ["list"], {}, ()) == []
    server.enqueue(text("hi"))
    names = ("claw_batch.sandbox.bubblewrap", "ctypes")
    assert loaded(root, ["run", "-q", "plain"], fake_env(server), names) == []


def test_a_project_s_second_run_imports_no_validator(tmp_path: Path, server: FakeOpenAI) -> None:
    """The first run validates before `.claw/` exists (a mistyped target must not make it), and
    keeps the validated clawfile once the run has made it: the second run reads it."""
    root = make_project(tmp_path / "p", CLAWFILE)
    server.enqueue(text("hi"))
    assert loaded(root, ["run", "-q", "plain"], fake_env(server), ("pydantic",)) != []
    assert (root / ".claw/clawfile.json").is_file()
    server.enqueue(text("hi again"))
    names = ("claw_batch.clawfile.validate", "yaml")
    assert loaded(root, ["run", "-q", "-B", "plain"], fake_env(server), names) == []
    assert (root / "out/hi.md").read_text() == "hi again\n"


def test_a_mistyped_first_run_makes_no_dot_claw(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    assert loaded(root, ["run", "-q", "nope"], {}, ()) == []
    assert not (root / ".claw").exists()

"""An unset `api_key_env` variable is found before any job (issue 16, point 5): `claw
validate` warns, `claw run` exits 2 naming it, having called no model and written no note."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

NOW = "2026-11-22T23:05:00+01:00"
MISSING = (
    "environment variable ROUTER_KEY is not set: provider 'router' reads its API key from "
    "it (api_key_env), for tasks digest, triage; set it (export ROUTER_KEY=...) or run "
    "with --replay"
)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def project(root: Path, server: FakeOpenAI) -> Path:
    return make_project(
        root,
        f"""
        version: 1
        model: fake-model
        providers:
          router: {{base_url: "{server.base_url}", api_key_env: ROUTER_KEY}}
        tasks:
          local:
            prompt: hi
            output: local.md
          digest:
            model: router/big
            prompt: hi
            output: digest.md
          triage:
            model: router/big
            prompt: hi
            output: triage.md
        """,
    )


def env(server: FakeOpenAI, **more: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "CLAW_NOW": NOW, **more}


def test_validate_warns_of_an_unset_key_variable(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path, server)
    r = claw(root, "validate", "-q", env=env(server))
    assert (r.exit_code, r.stderr) == (
        0,
        f"claw: clawfile.yaml: providers.router.api_key_env: warning: {MISSING}\n",
    )
    r = claw(root, "validate", "-q", env=env(server, ROUTER_KEY="sk-router-0123456789"))
    assert (r.exit_code, r.stderr) == (0, "")


def test_run_exits_2_before_any_job_or_note(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path, server)
    r = claw(root, "run", "local", "digest", "triage", env=env(server))
    assert (r.exit_code, r.stderr) == (2, f"claw: {MISSING}\n")
    assert server.requests == []
    assert not (root / "workspace/memory").exists()
    assert not (root / "local.md").exists()


def test_run_checks_only_the_providers_its_tasks_call(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path, server)
    server.enqueue(text("fine"))
    r = claw(root, "run", "local", env=env(server))
    assert r.exit_code == 0, r.stderr
    assert (root / "local.md").read_text() == "fine\n"
    # --model sends every task to the default endpoint: no router key needed
    server.enqueue(text("also fine"), text("also fine"))
    r = claw(root, "run", "-B", "digest", "triage", "--model", "fake-model", env=env(server))
    assert r.exit_code == 0, r.stderr


def test_dry_run_warns_and_replay_needs_no_key(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path, server)
    r = claw(root, "run", "-n", "digest", "triage", env=env(server))
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith(f"claw: warning: {MISSING}\n"), r.stderr
    server.enqueue(text("digest"), text("triage"))
    keyed = env(server, ROUTER_KEY="sk-router-0123456789")
    r = claw(root, "run", "--record", "digest", "triage", env=keyed)
    assert r.exit_code == 0, r.stderr
    r = claw(root, "run", "-B", "--replay", "digest", "triage", env=env(server))
    assert r.exit_code == 0, r.stderr
    assert len(server.requests) == 2


def test_up_to_date_tasks_need_no_key(tmp_path: Path, server: FakeOpenAI) -> None:
    root = project(tmp_path, server)
    server.enqueue(text("local"), text("digest"), text("triage"))
    keyed = env(server, ROUTER_KEY="sk-router-0123456789")
    assert claw(root, "run", "local", "digest", "triage", env=keyed).exit_code == 0
    # only `local` is out of date: it runs, and the router's tasks call nothing
    (root / "local.md").unlink()
    server.enqueue(text("local again"))  # asked again: not the reply the call cache keeps
    r = claw(root, "run", "--no-cache", "local", "digest", "triage", env=env(server))
    assert r.exit_code == 0, r.stderr
    assert (root / "local.md").read_text() == "local again\n"
    # -B runs them all: the key is needed again
    r = claw(root, "run", "-B", "digest", "triage", env=env(server))
    assert (r.exit_code, r.stderr) == (2, f"claw: {MISSING}\n")
    assert len(server.requests) == 4


@pytest.mark.parametrize("key", ["sk-abc\r\nX-Injected: 1", "sk-abc\r", "sk-abc\n"])
def test_a_key_with_a_line_break_is_refused_not_sent(
    tmp_path: Path, server: FakeOpenAI, key: str
) -> None:
    """A key goes into a request header: a line break in it would end the header and start
    another (a trailing CR from a file written on Windows, or a pasted second line)."""
    root = project(tmp_path, server)
    server.enqueue(text("fine"))
    r = claw(root, "run", "digest", env=env(server, ROUTER_KEY=key))
    assert r.exit_code == 1, r.stderr
    assert (
        "environment variable ROUTER_KEY holds a line break or another control character: "
        "an API key cannot; check how it was set" in r.stderr
    )
    assert server.requests == []
    assert "sk-abc" not in r.stderr

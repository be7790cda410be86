"""An endpoint that cannot answer says why at once (issue 16, point 6): nothing listening on
a local port is not an outage to wait out, and a gateway's nested cause reaches the user."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from fake_openai import FakeOpenAI, raw
from helpers import claw, make_project

NOW = "2026-11-22T23:05:00+01:00"


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: bound, then let go."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_closed_local_port_fails_at_once_naming_the_url(tmp_path: Path) -> None:
    port = closed_port()
    root = make_project(
        tmp_path, "version: 1\nmodel: qwen\ntasks:\n  t: {prompt: go, output: t.md}\n"
    )
    # $OPENAI_BASE_URL may carry credentials (the clawfile refuses them): never shown
    url = f"http://user:pw-0123456789@127.0.0.1:{port}/v1"
    r = claw(root, "run", "t", env={"OPENAI_BASE_URL": url, "CLAW_NOW": NOW})
    assert r.exit_code == 1
    message = (
        f"connection refused: http://127.0.0.1:{port}/v1 (model 'qwen'); is the server "
        "running? check $OPENAI_BASE_URL"
    )
    assert re.fullmatch(
        rf"start t\nfailed t \(\d+\.\d s, 0 tokens\): {re.escape(message)}\n", r.stderr
    ), r.stderr
    (transcript,) = (root / ".claw/runs").glob("*/t.jsonl")
    assert message in transcript.read_text()


def test_a_named_providers_refusal_names_its_clawfile_key(tmp_path: Path) -> None:
    """Issue 16 (new users): the URL came from the clawfile, not from $OPENAI_BASE_URL."""
    port = closed_port()
    root = make_project(
        tmp_path,
        f"""
        version: 1
        model: local/qwen
        providers:
          local: {{base_url: "http://127.0.0.1:{port}/v1"}}
        tasks:
          t: {{prompt: go, output: t.md}}
        """,
    )
    r = claw(root, "run", "t", env={"CLAW_NOW": NOW})
    assert r.exit_code == 1
    message = (
        f"connection refused: http://127.0.0.1:{port}/v1 (model 'qwen'); is the server "
        "running? check providers.local.base_url in clawfile.yaml"
    )
    assert re.fullmatch(
        rf"start t\nfailed t \(\d+\.\d s, 0 tokens\): {re.escape(message)}\n", r.stderr
    ), r.stderr


def test_a_refusal_names_the_clawfile_the_run_was_given(tmp_path: Path) -> None:
    """`claw run -f nightly.yaml`: the key to check is in nightly.yaml, not clawfile.yaml."""
    port = closed_port()
    root = make_project(tmp_path, "version: 1\ntasks:\n  other: {prompt: go, output: o.md}\n")
    (root / "nightly.yaml").write_text(
        "version: 1\nmodel: local/qwen\n"
        f"providers:\n  local: {{base_url: 'http://127.0.0.1:{port}/v1'}}\n"
        "tasks:\n  t: {prompt: go, output: t.md}\n"
    )
    r = claw(root, "run", "t", "-f", str(root / "nightly.yaml"), env={"CLAW_NOW": NOW})
    assert r.exit_code == 1
    assert "check providers.local.base_url in nightly.yaml\n" in r.stderr, r.stderr


def test_gateway_nested_cause_is_in_the_job_error(tmp_path: Path) -> None:
    upstream = '{"error":{"message":"max_tokens (200000) exceeds the context window"}}'
    body = {
        "error": {
            "message": "Provider returned error",
            "code": 400,
            "metadata": {"raw": upstream, "provider_name": "Together"},
        }
    }
    root = make_project(
        tmp_path, "version: 1\nmodel: fake-model\ntasks:\n  t: {prompt: go, output: t.md}\n"
    )
    with FakeOpenAI() as server:
        server.enqueue(raw(body, status=400))
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": NOW}
        r = claw(root, "run", "t", env=env)
        url = server.base_url.rstrip("/")
    assert r.exit_code == 1
    message = (
        f"model 'fake-model' at {url}: HTTP 400: Provider returned error (Together says: "
        "max_tokens (200000) exceeds the context window); the endpoint refused the request; "
        "check that the model supports tool calls"
    )
    assert re.fullmatch(
        rf"start t\nfailed t \(\d+\.\d s, 0 tokens\): {re.escape(message)}\n", r.stderr
    ), r.stderr


def test_a_base_url_without_a_path_is_asked_not_a_crash(tmp_path: Path) -> None:
    """`OPENAI_BASE_URL=http://127.0.0.1:9` (no /v1, no slash) made the request URL
    `http://127.0.0.1:9chat/completions`: an InvalidURL crash, not the endpoint's answer."""
    root = make_project(
        tmp_path, "version: 1\nmodel: qwen\ntasks:\n  t: {prompt: go, output: t.md}\n"
    )
    with FakeOpenAI() as server:
        bare = server.base_url.removesuffix("/v1")
        r = claw(root, "run", "t", env={"OPENAI_BASE_URL": bare, "CLAW_NOW": NOW})
    assert r.exit_code == 1
    assert "unexpected error" not in r.stderr
    assert "no route /chat/completions" in r.stderr

"""A streamable-HTTP MCP server on 127.0.0.1 (tests/mcp/servers/tools.py --http), used by a
task through `claw run`: its header comes from the environment and is never written, its
results arrive fenced and taint the job, and --record/--replay cover it offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fake_openai import FakeOpenAI, call, text, tool_calls
from test_mcp_run import claw, tool_results

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mcp"))
from helpers import make_project
from mcphelpers import http_server

TOKEN = "tok-http-0123456789abcdefSECRET"


def clawfile(url: str) -> str:
    return f"""
        version: 1
        model: fake-model
        mcp_servers:
          remote: {{url: '{url}', headers_env: {{Authorization: REMOTE_AUTH}}}}
        tasks:
          ask:
            prompt: "Echo something."
            output: out/answer.md
            tools: [read, write, mcp.remote.echo]
            permissions: {{write: ["notes/**"]}}
    """


def test_a_task_uses_a_streamable_http_server_with_a_header_from_the_environment(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    env = {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "REMOTE_AUTH": f"Bearer {TOKEN}",
    }
    server.enqueue(
        tool_calls(call("remote__echo", {"text": f"over http, {TOKEN}"})),
        tool_calls(call("write", {"path": "notes/x.md", "content": "x"})),  # after the taint
        text("echoed"),
    )
    with http_server(TOKEN) as url:
        root = make_project(tmp_path / "p", clawfile(url))
        r = claw(root, "run", "--record", env=env)
    assert r.exit_code == 0, r.stderr
    echoed, refused = tool_results(server.requests[1])[0], tool_results(server.requests[2])[-1]
    assert "<untrusted-data" in echoed and "over http" in echoed
    assert TOKEN not in echoed  # the header's value, echoed back by the server, is redacted
    assert refused.startswith("error: refused: write: this job read outside content")
    assert not (root / "notes/x.md").exists()
    for path in [*root.rglob("*.json"), *root.rglob("*.jsonl"), *root.rglob("*.log")]:
        assert TOKEN not in path.read_text(errors="replace"), path
    assert json.loads((root / "cassettes/mcp/remote.json").read_text())["calls"]
    # Offline: the server is gone, its variable unset; the cassette answers.
    (root / "out/answer.md").unlink()
    offline = {"OPENAI_API_KEY": env["OPENAI_API_KEY"]}
    r = claw(root, "run", "--replay", env=offline)
    assert r.exit_code == 0, r.stderr
    assert (root / "out/answer.md").read_text() == "echoed\n"

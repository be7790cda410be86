"""Ctrl-C or SIGTERM of `claw run` ends a job stuck in an MCP call at once: exit 130, and
no server process is left (the entry's timeout is 600 s: nothing waits for it)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from mcphelpers import NO_SANDBOX, await_gone, interrupt_when_logged, project

MODES = ["none"] if NO_SANDBOX and not os.environ.get("CI") else ["bubblewrap", "none"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_of_claw_run_ends_a_hung_mcp_call_at_once(
    tmp_path: Path, mode: str, signum: int
) -> None:
    root = project(tmp_path / "p")
    (root / "clawfile.yaml").write_text(
        "model: fake-model\n"
        "mcp_servers:\n"
        f"  tools: {{command: [python, servers/tools.py], timeout: 600, sandbox: {mode}}}\n"
        "tasks:\n"
        "  ask: {prompt: Ask., output: out/a.md, tools: [mcp.tools.hang]}\n"
    )
    with FakeOpenAI() as fake:
        fake.enqueue(tool_calls(call("tools__hang", {})), text("done"))
        env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test-01234"}
        argv = [sys.executable, "-m", "claw_batch", "run", "-C", str(root)]
        log = root / ".claw" / "mcp" / "tools.log"  # the call hangs in the server once logged
        _, below = interrupt_when_logged(argv, log, "hanging on purpose", signum, env)
        assert not await_gone(below), "a server process outlived claw"

"""One hub per run: its servers shared by the run's jobs (-j), and gone when the run ends,
however it ends (Ctrl-C, SIGTERM, a job that fails)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, hang, text, tool_calls
from test_mcp_run import SCRIPT, claw, clawfile, gone, make_project, tag_of, tagged, tool_results


def boot_of(result: str) -> str:
    """Which server process answered (tests/mcpwire/servers/notes.py `pid`)."""
    return result.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 130), (signal.SIGKILL, -9)]
)
def test_a_signal_ends_the_run_and_its_servers(tmp_path: Path, signum: int, code: int) -> None:
    """Ctrl-C and SIGTERM end the run (130) and its servers; kill -9 of claw ends them too."""
    tag = tag_of(tmp_path)
    root = make_project(
        tmp_path / "p", clawfile("[mcp.notes.pid]", notes=f"{SCRIPT}, --tag, {tag}")
    )
    with FakeOpenAI() as srv:
        srv.enqueue(tool_calls(call("notes__pid", {})), hang(30))
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-x"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "claw_batch", "run"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while len(srv.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(srv.requests) == 2, "claw never sent the tool's result"
        assert tagged(tag), "the server is not running"
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == code, stderr
    assert gone(tag)


def test_the_jobs_of_a_run_share_one_server_process(
    tmp_path: Path,
) -> None:
    tag = tag_of(tmp_path)
    body = clawfile("[mcp.notes.pid]", notes=f"{SCRIPT}, --tag, {tag}").replace(
        "output: out/answer.md", 'foreach: "in/*.txt"\n            output: "out/{{ item.stem }}.md"'
    )
    root = make_project(tmp_path / "p", body, {"in/a.txt": "a", "in/b.txt": "b"})
    with FakeOpenAI() as srv:
        srv.handler = lambda body: (
            text("done")
            if body["messages"][-1]["role"] == "tool"
            else tool_calls(call("notes__pid", {}))
        )
        env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-test-0123456789abcdef0123"}
        r = claw(root, "run", "-j", "2", env=env)
        assert r.exit_code == 0, r.stderr
        boots = [boot_of(tool_results(q)[0]) for q in srv.requests if tool_results(q)]
    assert len(boots) == 2 and len(set(boots)) == 1  # two jobs, one server process
    assert gone(tag)

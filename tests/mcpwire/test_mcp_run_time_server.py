"""The published reference server `mcp-server-time` (PyPI), driven through `claw run` as a
user would declare it: its tool offered, called, its answer fenced; recorded and replayed
offline; and `always:` making a job that asked it the time never up to date."""

from __future__ import annotations

import sys
from pathlib import Path

from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import make_project
from test_mcp_run import claw, tool_results

CLAWFILE = f"""
    version: 1
    model: fake-model
    mcp_servers:
      time: {{command: [{sys.executable}, -m, mcp_server_time, --local-timezone, UTC]}}
    tasks:
      clock:
        description: Asks the time
        prompt: "What time is it in Paris?"
        output: out/time.md
        tools: [mcp.time.get_current_time]
        always: [mcp.time.*]
"""


def test_the_time_server_answers_through_claw_run_and_replays_offline(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-0123456789abcdef0123"}
    root = make_project(tmp_path / "p", CLAWFILE)
    asked = tool_calls(call("time__get_current_time", {"timezone": "Europe/Paris"}))
    server.enqueue(asked, text("It is late in Paris."))
    r = claw(root, "run", "--record", env=env)
    assert r.exit_code == 0, r.stderr
    first, second = server.requests
    (offered,) = first["tools"]
    assert offered["function"]["name"] == "time__get_current_time"
    assert "timezone" in offered["function"]["parameters"]["properties"]
    (result,) = tool_results(second)
    assert '"timezone": "Europe/Paris"' in result and "<untrusted-data" in result
    # always: [mcp.time.*]: the job asked the server, so it is never up to date
    assert (
        "always: its last run called mcp.time.get_current_time"
        in claw(root, "plan", env=env).stdout
    )
    # offline, and with the server's command gone: the cassette answers
    broken = CLAWFILE.replace("mcp_server_time", "no_such_module_anywhere")
    (root / "clawfile.yaml").write_text(broken.replace("\n    ", "\n").lstrip())
    r = claw(root, "run", "--replay", env={"OPENAI_API_KEY": "sk-test-0123456789abcdef0123"})
    assert r.exit_code == 0, r.stderr
    assert (root / "out/time.md").read_text() == "It is late in Paris.\n"
    assert len(server.requests) == 2


def test_a_job_cannot_plant_a_module_a_python_m_server_imports(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """The attacker's job may write `*.py` at the project root, the working directory of
    `python -m mcp_server_time`: it plants `anyio.py`, which the server's SDK imports. The
    server never imports it (PYTHONSAFEPATH): the next run's call is answered."""
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-0123456789abcdef0123"}
    plant = """
      plant:
        prompt: "Read the ticket."
        output: out/plant.md
        tools: [write]
        permissions: {write: ["*.py"]}
"""
    root = make_project(tmp_path / "p", CLAWFILE + plant)
    evil = "import os\nos.write(2, b'PLANTED CODE RAN\\n')\nraise SystemExit(7)\n"
    server.enqueue(tool_calls(call("write", {"path": "anyio.py", "content": evil})), text("ok"))
    assert claw(root, "run", "plant", env=env).exit_code == 0
    assert (root / "anyio.py").read_text() == evil  # the job wrote it: its grant allows that
    asked = tool_calls(call("time__get_current_time", {"timezone": "Europe/Paris"}))
    server.enqueue(asked, text("It is late in Paris."))
    r = claw(root, "run", "clock", env=env)
    assert r.exit_code == 0, r.stderr
    (result,) = tool_results(server.requests[-1])
    assert '"timezone": "Europe/Paris"' in result, result
    log = (root / ".claw/mcp/time.log").read_text()
    assert "PLANTED CODE RAN" not in log

"""A server's life: started once, shared by threads, restarted once after a crash, timed out
when it hangs, and gone when claw is (close, or kill -9 of claw). Streamable HTTP too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import HANG
from mcphelpers import (
    NO_SANDBOX,
    await_gone,
    descendants,
    http_server,
    hub,
    interrupt_when_logged,
    project,
    server,
)

from claw_batch.config import McpServer
from claw_batch.mcp.hub import ServerFailure

MODES = ["none"] if NO_SANDBOX and not os.environ.get("CI") else ["bubblewrap", "none"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return project(tmp_path / "proj")


def test_one_server_serves_many_threads_at_once(root: Path, mode: str) -> None:
    with hub(root, {"tools": server("tools", sandbox=mode)}) as h:
        results: dict[int, str] = {}

        def work(i: int) -> None:
            results[i] = h.call("tools", "add", {"a": i, "b": 1}, timeout=60).text

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == {i: str(i + 1) for i in range(8)}
        assert [t.name for t in h.tools("tools")] == ["echo", "add", "pid", "crash", "hang"]


def test_a_crashed_server_is_restarted_once_then_its_tools_fail_with_the_reason(
    root: Path, mode: str
) -> None:
    with hub(root, {"tools": server("tools", sandbox=mode)}) as h:
        with pytest.raises(ServerFailure) as first:
            h.call("tools", "crash", {"code": 3}, timeout=60)
        assert "crashed during crash: exited with status 3" in str(first.value)
        assert "crashing on purpose with status 3" in str(first.value)  # its stderr's tail
        assert "started again for the next call" in str(first.value)
        assert h.call("tools", "echo", {"text": "back"}, timeout=60).text == "back"
        with pytest.raises(ServerFailure, match="not started again"):
            h.call("tools", "crash", {"code": 4}, timeout=60)
        with pytest.raises(ServerFailure) as after:
            h.call("tools", "echo", {"text": "no"}, timeout=60)
        assert "crashed 2 times and is not started again" in str(after.value)
        assert "exited with status 4" in str(after.value)
    log = (root / ".claw" / "mcp" / "tools.log").read_text()
    assert "crashing on purpose with status 3" in log


def test_a_hung_call_fails_at_its_timeout_and_the_server_still_answers(
    root: Path, mode: str
) -> None:
    with hub(root, {"tools": server("tools", sandbox=mode)}) as h:
        h.tools("tools")
        with pytest.raises(ServerFailure, match=r"hang did not answer within 1 s"):
            h.call("tools", "hang", {}, timeout=1)
        assert h.call("tools", "echo", {"text": "still"}, timeout=60).text == "still"


def test_the_entrys_timeout_bounds_a_call_too(root: Path) -> None:
    entry = server("tools", sandbox="none", timeout=1.0)
    with hub(root, {"tools": entry}) as h, pytest.raises(ServerFailure, match=r"within 1 s"):
        h.call("tools", "hang", {}, timeout=HANG)


def test_a_handshake_that_never_comes_fails_after_startup_timeout(root: Path, mode: str) -> None:
    with hub(root, {"silent": server("silent", sandbox=mode, startup_timeout=1.0)}) as h:
        with pytest.raises(ServerFailure) as e:
            h.tools("silent")
        assert "did not answer its handshake within 1 s" in str(e.value)
        assert "silent: up, and saying nothing" in str(e.value)
        with pytest.raises(ServerFailure, match="handshake"):  # not tried again
            h.call("silent", "x", {}, timeout=5)


def test_close_leaves_no_server_process(root: Path, mode: str) -> None:
    with hub(root, {"tools": server("tools", sandbox=mode)}) as h:
        h.tools("tools")
        below = descendants(os.getpid())
        assert below
    assert not await_gone(below)


DRIVER = """
import os, sys, time
from pathlib import Path
from claw_batch.config import McpServer
from claw_batch.mcp.hub import Hub
hub = Hub(Path(sys.argv[1]), {"tools": McpServer(command=("python", "servers/tools.py"),
                                                  sandbox=sys.argv[2])}, os.environ)
hub.tools("tools")
print("ready", flush=True)
time.sleep(600)
"""


def test_kill_9_of_claw_leaves_no_server_process(root: Path, mode: str) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(root), mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "ready"
        below = descendants(driver.pid)
        assert below, "the server runs below the driver"
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        assert not await_gone(below), "a server process outlived claw"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if driver.stdout is not None:
            driver.stdout.close()


def test_streamable_http_with_a_header_from_the_environment(root: Path) -> None:
    token = "tok-0123456789abcdefSECRET"
    with http_server(token) as url:
        entry = McpServer(url=url, headers_env={"Authorization": "TOOLS_AUTH"})
        env = {**os.environ, "TOOLS_AUTH": f"Bearer {token}"}
        with hub(root, {"remote": entry}, env=env) as h:
            assert h.call("remote", "echo", {"text": "over http"}, timeout=60).text == ("over http")
        wrong = {**os.environ, "TOOLS_AUTH": "Bearer wrong-0123456789abcdef"}
        with hub(root, {"remote": entry}, env=wrong) as h, pytest.raises(ServerFailure) as e:
            h.tools("remote")
        assert "wrong-0123456789abcdef" not in str(e.value)


def test_a_header_whose_variable_is_not_set_names_the_variable(root: Path) -> None:
    entry = McpServer(url="http://127.0.0.1:9/mcp", headers_env={"Authorization": "NO_SUCH_VAR"})
    env = {k: v for k, v in os.environ.items() if k != "NO_SUCH_VAR"}
    with hub(root, {"remote": entry}, env=env) as h, pytest.raises(ServerFailure) as e:
        h.tools("remote")
    assert "NO_SUCH_VAR" in str(e.value) and "not set" in str(e.value)


def test_the_reference_time_server_answers_through_the_hub(root: Path) -> None:
    entry = McpServer(command=("python", "-m", "mcp_server_time"))
    with hub(root, {"time": entry}) as h:
        reply = h.call("time", "get_current_time", {"timezone": "Etc/UTC"}, timeout=60)
        assert json.loads(reply.text)["timezone"] == "Etc/UTC"


def _cmdlines(pids: set[int]) -> list[str]:
    found = []
    for pid in pids:
        try:
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_of_claw_mcp_list_stops_a_server_mid_handshake(
    root: Path, mode: str, signum: int
) -> None:
    (root / "clawfile.yaml").write_text(
        "model: gpt-4o-mini\n"
        "mcp_servers:\n"
        f"  silent: {{command: [python, servers/silent.py], startup_timeout: {HANG}, "
        f"sandbox: {mode}}}\n"
        "tasks:\n  t: {prompt: hi}\n"
    )
    argv = [sys.executable, "-m", "claw_batch", "mcp", "list", "-C", str(root)]
    log = root / ".claw" / "mcp" / "silent.log"  # the server is up once it said so

    def started(below: set[int]) -> None:
        assert any("silent.py" in c for c in _cmdlines(below))

    err, below = interrupt_when_logged(argv, log, "saying nothing", signum, check=started)
    assert "claw: interrupted" in err
    assert not await_gone(below), "a server process outlived claw"

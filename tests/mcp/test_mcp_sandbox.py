"""A stdio server runs in the bash sandbox: what a hostile server tries (servers/escape.py)
fails, as root (the server runs as nobody) and as a plain user."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import AS_RUNNER, RUNNER, runner_env, runner_python
from mcphelpers import NO_SANDBOX, ROOT, hub, project, server

from claw_batch.mcp.hub import ServerFailure
from claw_batch.safety.paths import Policy

if NO_SANDBOX and not os.environ.get("CI"):
    pytest.skip(f"no sandbox here: {NO_SANDBOX}", allow_module_level=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "outside.txt").write_text("a secret outside the project\n")
    return project(tmp_path / "proj")


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that accepts: its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    sock.close()


def said(root: Path, tool: str, args: dict[str, object], **settings: object) -> str:
    with hub(root, {"esc": server("escape", **settings)}) as h:
        return h.call("esc", tool, args, timeout=30).text


def test_a_server_cannot_read_the_shadow_file_a_file_outside_nor_claws_state(
    root: Path, tmp_path: Path
) -> None:
    with hub(root, {"esc": server("escape")}) as h:
        for path in ("/etc/shadow", str(tmp_path / "outside.txt"), ".claw/state.db"):
            assert h.call("esc", "read", {"path": path}, timeout=30).text.startswith("denied")
        # what it may read: the project
        assert h.call("esc", "read", {"path": "servers/README.md"}, timeout=30).text.startswith(
            "ok: # MCP servers"
        )


def test_a_server_cannot_write_the_project_without_a_policy(root: Path) -> None:
    assert said(root, "write", {"path": "planted.txt"}).startswith("denied")
    assert not (root / "planted.txt").exists()


def test_a_server_writes_only_where_its_policy_lets_it_and_never_protected_paths(
    root: Path,
) -> None:
    (root / "out").mkdir()
    (root / "out" / "keep").write_text("kept\n")
    policy = Policy(root, write_globs=("out/**",), protected=(".git", ".claw", "out/keep"))
    with hub(root, {"esc": server("escape")}, policies={"esc": policy}) as h:
        assert h.call("esc", "write", {"path": "out/a.txt"}, timeout=30).text == "ok: written"
        assert h.call("esc", "write", {"path": "b.txt"}, timeout=30).text.startswith("denied")
        denied = h.call("esc", "write", {"path": "out/keep"}, timeout=30).text
        assert denied.startswith("denied")
    assert (root / "out" / "a.txt").is_file() and not (root / "b.txt").exists()
    assert (root / "out" / "keep").read_text() == "kept\n"


def test_a_server_cannot_reach_a_listener_on_localhost_without_network_true(
    root: Path, listener: int
) -> None:
    assert said(root, "connect", {"port": listener}).startswith("denied")
    assert said(root, "connect", {"port": listener}, network=True) == "ok: connected"


def test_a_server_never_gets_a_provider_key_even_listed_and_claw_says_so(root: Path) -> None:
    env = {**os.environ, "OPENAI_API_KEY": "sk-never-0123456789abcdefXYZ", "GREETING": "hi"}
    entry = server("escape", env=("OPENAI_API_KEY", "GREETING"))
    with hub(root, {"esc": entry}, env=env) as h:
        assert h.call("esc", "getenv", {"name": "OPENAI_API_KEY"}, timeout=30).text == (
            "denied: not set"
        )
        assert h.call("esc", "getenv", {"name": "GREETING"}, timeout=30).text == "ok: hi"
        assert h.call("esc", "getenv", {"name": "PATH"}, timeout=30).text.startswith("ok: ")
        assert h.call("esc", "getenv", {"name": "HOME"}, timeout=30).text == "ok: /tmp"
        assert any("OPENAI_API_KEY is a provider's API key" in n for n in h.notes)


@pytest.mark.skipif(not ROOT, reason="as root only")
def test_as_root_a_server_runs_as_nobody(root: Path) -> None:
    assert said(root, "whoami", {}) == "ok: 65534"


DRIVER = """
import json, os, sys
from pathlib import Path
from claw_batch.config import McpServer
from claw_batch.mcp.hub import Hub
root = Path(sys.argv[1])
entry = McpServer(command=("python3", "servers/escape.py"), env=("PYTHONPATH",))
hub = Hub(root, {"esc": entry}, os.environ)
out = {}
for name, tool, args in json.loads(sys.argv[2]):
    out[name] = hub.call("esc", tool, args, timeout=30).text
hub.close()
print(json.dumps(out))
"""


@pytest.mark.skipif(not ROOT, reason="the plain user's run is the one the other tests make")
def test_as_a_plain_user_a_server_is_contained_the_same() -> None:
    env = runner_env()
    python = runner_python(env)
    if python is None:
        pytest.skip("no interpreter the runner may start")
    # Under /tmp itself: pytest's own folders are root's alone.
    top = Path("/tmp") / f"claw-mcp-{uuid.uuid4().hex}"
    top.mkdir(mode=0o755)
    try:
        (top / "outside.txt").write_text("a secret outside the project\n")
        root = project(top / "proj")
        subprocess.run(["chown", "-R", f"{RUNNER}:{RUNNER}", str(top)], check=True)
        calls = [
            ["shadow", "read", {"path": "/etc/shadow"}],
            ["outside", "read", {"path": str(top / "outside.txt")}],
            ["state", "read", {"path": ".claw/state.db"}],
            ["write", "write", {"path": "planted.txt"}],
            ["uid", "whoami", {}],
        ]
        done = subprocess.run(
            [*AS_RUNNER, python, "-c", DRIVER, str(root), json.dumps(calls)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0 and "refused" in done.stderr:
            pytest.skip(f"the plain user gets no sandbox here: {done.stderr[-300:]}")
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert all(out[k].startswith("denied") for k in ("shadow", "outside", "state", "write"))
        assert out["uid"] == f"ok: {RUNNER}"
        assert not (root / "planted.txt").exists()
    finally:
        shutil.rmtree(top)


def test_no_bubblewrap_refuses_the_server_with_the_reason(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with hub(root, {"esc": server("escape")}) as h, pytest.raises(ServerFailure) as e:
        h.tools("esc")
    assert "MCP server 'esc' is refused: no sandbox can be started here" in str(e.value)
    assert "sandbox: none" in str(e.value)


def test_a_command_not_in_the_sandbox_says_where_claw_looked(root: Path) -> None:
    from claw_batch.config import McpServer

    entry = McpServer(command=("uvx-not-installed", "mcp-server-git"))
    with hub(root, {"git": entry}) as h, pytest.raises(ServerFailure) as e:
        h.tools("git")
    message = str(e.value)
    assert "command not found: claw looked for uvx-not-installed in" in message
    assert "/usr/bin" in message and "sandbox: none" in message

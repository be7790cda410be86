"""What the MCP tests share: a project holding the test servers (tests/mcp/servers), a hub
over it, a streamable-HTTP server on 127.0.0.1, and the processes a pid leaves behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from claw_batch.config import McpServer
from claw_batch.mcp.hub import Hub
from claw_batch.sandbox import bubblewrap

SERVERS = Path(__file__).parent / "servers"
ROOT = os.geteuid() == 0
NO_SANDBOX = bubblewrap.unavailable(ROOT)


def project(path: Path) -> Path:
    """A project with the test servers in servers/ and a .claw/ holding runner state."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copytree(SERVERS, path / "servers", ignore=shutil.ignore_patterns("__pycache__"))
    (path / ".claw").mkdir(exist_ok=True)
    (path / ".claw" / "state.db").write_text("runner state\n")
    return path


def server(script: str, **settings: object) -> McpServer:
    return McpServer(command=("python", f"servers/{script}.py"), **settings)  # type: ignore[arg-type]


@contextlib.contextmanager
def hub(root: Path, servers: Mapping[str, McpServer], **kwargs: object) -> Iterator[Hub]:
    env = kwargs.pop("env", os.environ)
    h = Hub(root, servers, env, **kwargs)  # type: ignore[arg-type]
    try:
        yield h
    finally:
        h.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def http_server(token: str | None = None) -> Iterator[str]:
    """tools.py over streamable HTTP on 127.0.0.1; its URL. With `token`, it answers only
    `Authorization: Bearer TOKEN`."""
    port = free_port()
    env = {**os.environ, **({"TOOLS_TOKEN": token} if token else {})}
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS / "tools.py"), "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


def descendants(pid: int) -> set[int]:
    """The live processes below `pid`, read from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def await_gone(pids: set[int], seconds: float = 30.0) -> set[int]:
    """The pids still alive after waiting up to `seconds` for them to end."""
    deadline = time.monotonic() + seconds
    while (left := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def interrupt_when_logged(
    argv: list[str],
    log: Path,
    marker: str,
    signum: int,
    env: Mapping[str, str] | None = None,
    check: Callable[[set[int]], None] = lambda below: None,
) -> tuple[str, set[int]]:
    """Start claw (`argv`), wait until the server's log says `marker` (a poll, not a timing),
    `check` the processes below claw, send it `signum`; claw's stderr once it has exited with
    130, and the processes that were below it (for await_gone)."""
    from helpers import HANG

    claw = subprocess.Popen(
        argv,
        env=dict(os.environ if env is None else env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        below: set[int] = set()
        for _ in range(1200):
            below = descendants(claw.pid)
            if log.is_file() and marker in log.read_text():
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the server never logged {marker!r}")
        check(below)
        claw.send_signal(signum)
        _, err = claw.communicate(timeout=HANG)  # a hang guard, not a timing
        assert claw.returncode == 130, err
        return err, below
    finally:
        if claw.poll() is None:
            claw.kill()
            claw.communicate()

"""A real Ray cluster of two nodes on this machine, on 127.0.0.1 only (the fixtures are in
tests/cluster/conftest.py; bench/ray.py starts one too).

    start_cluster()      a RayTestCluster (head + a second node)
    cluster.executor()   the Executor that points `claw_batch.cluster.connect` at it
    cluster.kill_node(2) SIGKILL the second node's raylet (its workers die with it)
    loopback_only(c)     every TCP socket of the cluster's processes (and the given pids) is
                         on 127.0.0.1: listeners and connections (`ss -tanp`)

Each node has its own explicit ports and its own short --temp-dir (unix socket paths stay
under 108 characters), four CPUs (four jobs at once), no dashboard. Both nodes get WORKER_ENV
in their environment (the test's provider key lives only there) and this folder on PYTHONPATH
(raywork). Teardown kills every process of both nodes by pid — Ray workers take process groups
of their own — and checks that none is left. Nothing here sets RAY_ADDRESS in the tests' own
environment."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from claw_batch.config import Executor

HERE = Path(__file__).parent
WORKER_ENV = {"CLAW_TEST_WORKER_KEY": "sk-only-on-the-workers"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ports(n: int) -> list[int]:
    found: set[int] = set()
    while len(found) < n:
        found.add(_free_port())
    return sorted(found)


def _worker_range() -> tuple[int, int]:
    """A range of 40 free ports for a node's worker processes."""
    while True:
        base = random.randrange(20000, 30000)
        ports = range(base, base + 40)
        try:
            for p in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return base, base + 39


@dataclass
class Node:
    temp_dir: Path
    raylet: int | None = None


@dataclass
class RayTestCluster:
    port: int
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def executor(self, max_retries: int = 3) -> Executor:
        return Executor(kind="ray", address=self.address, max_retries=max_retries)

    def pids(self) -> set[int]:
        """Every live process of the cluster: those started with a node's temp dir, those a
        node's raylet started (RAY_RAYLET_PID), and their descendants."""
        dirs = [str(n.temp_dir) for n in self.nodes]
        raylets = {str(n.raylet) for n in self.nodes if n.raylet}
        found: set[int] = set()
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                stat = (entry / "stat").read_text()
                state, ppid = stat.rsplit(")", 1)[1].split()[:2]
                if state == "Z":
                    continue
                parents[pid] = int(ppid)
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                if any(d in cmdline for d in dirs):
                    found.add(pid)
                    continue
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(f"RAY_RAYLET_PID={r}".encode() in environ for r in raylets):
                found.add(pid)
        grew = True
        while grew:
            more = {p for p, pp in parents.items() if pp in found and p not in found}
            found |= more
            grew = bool(more)
        found.discard(os.getpid())
        return found

    def kill_node(self, number: int) -> None:
        node = self.nodes[number - 1]
        assert node.raylet is not None
        os.kill(node.raylet, signal.SIGKILL)

    def close(self) -> None:
        for _ in range(20):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        left = self.pids()
        for node in self.nodes:
            shutil.rmtree(node.temp_dir, ignore_errors=True)
        assert not left, f"processes of the test cluster left: {sorted(left)}"


def _start_node(cluster: RayTestCluster, head: bool) -> None:
    temp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
    node = Node(temp)
    cluster.nodes.append(node)
    low, high = _worker_range()
    nm, om, rt, agent, agent_grpc, metrics, client, dash = _ports(8)
    args = [
        sys.executable, str(HERE / "raynode.py"), "start",
        "--node-ip-address", "127.0.0.1",
        "--num-cpus", "4",
        "--temp-dir", str(temp),
        "--node-manager-port", str(nm),
        "--object-manager-port", str(om),
        "--runtime-env-agent-port", str(rt),
        "--dashboard-agent-listen-port", str(agent),
        "--dashboard-agent-grpc-port", str(agent_grpc),
        "--metrics-export-port", str(metrics),
        "--min-worker-port", str(low),
        "--max-worker-port", str(high),
        "--object-store-memory", str(100 * 1024 * 1024),
        "--disable-usage-stats",
    ]  # fmt: skip
    if head:
        args += ["--head", "--port", str(cluster.port), "--include-dashboard", "false"]
        args += ["--ray-client-server-port", str(client), "--dashboard-port", str(dash)]
    else:
        args += ["--address", cluster.address]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(WORKER_ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(":")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for pid in cluster.pids():
        try:
            exe = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if (
            exe.endswith(b"/raylet")
            and str(temp).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        ):
            node.raylet = pid
    assert node.raylet is not None, "the node's raylet was not found"


def start_cluster() -> RayTestCluster:
    cluster = RayTestCluster(_free_port())
    try:
        _start_node(cluster, head=True)
        _start_node(cluster, head=False)
    except BaseException:
        cluster.close()
        raise
    return cluster


LOOPBACK = ("127.0.0.1:", "[::ffff:127.0.0.1]:")
ANY = ("0.0.0.0:*", "*:*", "[::]:*")


def loopback_only(cluster: RayTestCluster, *extra: int) -> int:
    """Asserts every TCP socket of the cluster's processes (and of `extra` pids) is on
    127.0.0.1; returns how many sockets it saw."""
    pids = cluster.pids() | set(extra)
    out = subprocess.run(["ss", "-tanp"], capture_output=True, text=True, check=True).stdout
    seen = 0
    for line in out.splitlines()[1:]:
        owners = {int(p) for p in _pids_in(line)}
        if not owners & pids:
            continue
        parts = line.split()
        local, peer = parts[3], parts[4]
        seen += 1
        assert local.startswith(LOOPBACK), f"a socket off loopback: {line}"
        assert peer.startswith(LOOPBACK) or peer in ANY, f"a connection off loopback: {line}"
    return seen


def _pids_in(line: str) -> list[str]:
    import re

    return re.findall(r"pid=(\d+)", line)

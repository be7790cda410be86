"""`claw run --executor ray` end to end: the real `claw` process as a user runs it, on the real
two-node cluster on loopback (tests/cluster/raycluster.py)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, text, tool_calls
from helpers import claw_process, make_project
from raycluster import WORKER_ENV, RayTestCluster, loopback_only
from test_example import copy_example

pytestmark = pytest.mark.slow

NOW = "2027-02-03T07:30:00+01:00"
# The key lives in the nodes' environment only (raycluster.WORKER_ENV): the coordinator has
# none, and none travels.
KEY_ENV = next(iter(WORKER_ENV))


def ledger(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    """What a run leaves in the ledger that does not depend on where or when it ran."""
    with sqlite3.connect(root / ".claw/state.db") as db:
        return {
            "jobs": sorted(db.execute("SELECT task, item, status, reason, output FROM jobs")),
            "done": sorted(
                db.execute("SELECT task, item, fingerprint, outputs, result FROM done").fetchall()
            ),
        }


def nodes(root: Path) -> list[str | None]:
    with sqlite3.connect(root / ".claw/state.db") as db:
        return [row[0] for row in db.execute("SELECT node FROM jobs ORDER BY item")]


def tickets(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "workspace/tickets").glob("*"))}


def on_cluster(cluster: RayTestCluster, *args: str) -> tuple[str, ...]:
    return (*args, "--executor", "ray", "--address", cluster.address)


def test_the_example_fan_out_on_the_cluster_is_what_a_local_run_makes(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    here, there = copy_example(tmp_path / "here"), copy_example(tmp_path / "there")
    env = {"CLAW_NOW": NOW, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    local = claw_process(here, "run", "triage", "--replay", env=env)
    assert local.returncode == 0, local.stderr
    remote = claw_process(
        there,
        *on_cluster(ray_cluster, "run", "triage", "--replay", "-j", "3"),
        env=env,
        timeout=180,
    )
    assert remote.returncode == 0, remote.stderr
    assert f"on the Ray cluster at {ray_cluster.address} (2 nodes)" in remote.stderr
    assert tickets(there) == tickets(here) and len(tickets(here)) == 3
    assert ledger(there) == ledger(here)
    assert nodes(here) == [None] * 3
    assert all(n and n.startswith("127.0.0.1 (") for n in nodes(there))
    log = claw_process(there, "log", "--json")
    assert log.returncode == 0, log.stderr
    assert "127.0.0.1 (" in log.stdout
    # and again: up to date, decided here, nothing sent to the cluster
    again = claw_process(
        there, *on_cluster(ray_cluster, "run", "triage", "--replay", "--json"), env=env
    )
    assert again.returncode == 0, again.stderr
    assert [j["status"] for j in json.loads(again.stdout)["jobs"]] == ["up-to-date"] * 3
    assert loopback_only(ray_cluster) > 0


FANOUT = """
    version: 1
    model: fake/fake-model
    providers:
      fake: {{base_url: "{url}", api_key_env: {key}}}
    defaults: {{temperature: 0}}
    tasks:
      slow:
        foreach: "inbox/*.txt"
        prompt: "Handle {{{{ item }}}}."
        output: "out/{{{{ item.stem }}}}.md"
        tools: [bash]
        permissions: {{bash: true}}
"""


def slow_jobs(body: dict[str, Any]) -> Reply:
    """Each job runs a command that takes a while (killed there, it is run again elsewhere),
    then answers with its item."""
    if body["messages"][-1]["role"] == "user":
        return tool_calls(call("bash", {"command": "sleep 6; echo slept"}, id="b1"))
    item = body["messages"][1]["content"].split("Handle ")[1].rstrip(".")
    return text(f"done {item}")


def turns(server: FakeOpenAI) -> Counter[tuple[str, str]]:
    """(the job's prompt, the role of the last message) of each request the server got."""
    return Counter(
        (r["messages"][1]["content"], r["messages"][-1]["role"]) for r in server.requests
    )


def journalled(root: Path) -> int:
    """The replies the run's call cache has in its journal on this machine (llm.callstore):
    what a run after a kill replays instead of paying again."""
    journals = (root / ".claw/cache").glob("journal-*.jsonl")
    return sum(len(j.read_bytes().splitlines()) for j in journals)


def wait_for(condition: Any, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.1)


def start_run(root: Path, cluster: RayTestCluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "claw_batch", *on_cluster(cluster, "run", *args)],
        cwd=root,
        env={**os.environ, "CLAW_NOW": NOW},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_node_killed_mid_run_every_job_finishes_once_and_nothing_is_paid_twice(
    fresh_cluster: RayTestCluster, tmp_path: Path
) -> None:
    items = 8  # what the two nodes hold at once (four Ray CPUs each, one a job)
    with FakeOpenAI() as server:
        server.handler = slow_jobs
        inbox = {f"inbox/m{n}.txt": f"message {n}\n" for n in range(items)}
        clawfile = FANOUT.format(url=server.base_url, key=KEY_ENV)
        root = make_project(tmp_path / "p", clawfile, inbox)
        run = start_run(root, fresh_cluster, "-j", str(items), "--json")
        try:
            # every job's first turn paid and journalled: all eight run, four on the second
            # node, in their commands now
            wait_for(lambda: journalled(root) >= items, 120)
            fresh_cluster.kill_node(2)
            out, err = run.communicate(timeout=240)
        finally:
            if run.poll() is None:
                run.kill()
        assert run.returncode == 0, err
        jobs = json.loads(out)["jobs"]
        assert sorted(j["status"] for j in jobs) == ["ok"] * items
        for n in range(items):  # each output whole, written once by the coordinator
            assert (root / f"out/m{n}.md").read_text() == f"done inbox/m{n}.txt\n"
        # each job recorded once, and every request the model got, once: the retried jobs
        # replayed their paid first turn from the call cache
        assert ledger(root)["jobs"] == sorted(
            ("slow", f"inbox/m{n}.txt", "ok", None, f"out/m{n}.md") for n in range(items)
        )
        assert set(turns(server).values()) == {1} and len(turns(server)) == 2 * items
        # the jobs the second node ran were run again on the head: all end there
        assert len(set(nodes(root))) == 1
        assert not list(root.rglob("*.claw-tmp*")) and not list((root / "out").glob(".*"))


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_cancels_the_cluster_jobs_keeps_what_finished_and_exits_130(
    ray_cluster: RayTestCluster, tmp_path: Path, stop: signal.Signals
) -> None:
    with FakeOpenAI() as server:
        handled: list[str] = []
        lock = threading.Lock()

        def quick_then_slow(body: dict[str, Any]) -> Reply:
            prompt = body["messages"][1]["content"]
            if "m0" in prompt:  # the first job finishes at once
                return text("done m0")
            with lock:
                handled.append(prompt)
            return slow_jobs(body)

        server.handler = quick_then_slow
        inbox = {f"inbox/m{n}.txt": f"message {n}\n" for n in range(4)}
        root = make_project(tmp_path / "p", FANOUT.format(url=server.base_url, key=KEY_ENV), inbox)
        run = start_run(root, ray_cluster, "-j", "4")
        try:
            wait_for(lambda: (root / "out/m0.md").exists() and len(handled) >= 3, 120)
            run.send_signal(stop)
            _, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
        assert run.returncode == 130, err
        rows = dict((r[1], r[2]) for r in ledger(root)["jobs"])
        assert rows["inbox/m0.txt"] == "ok"
        assert {rows[f"inbox/m{n}.txt"] for n in (1, 2, 3)} == {"interrupted"}
        assert not (root / "out/m1.md").exists()
        asked = len(server.requests)
        time.sleep(8)  # the cancelled jobs' commands would have ended by now: none asks again
        assert len(server.requests) == asked


def test_a_worker_without_the_key_fails_its_job_naming_the_variable(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    with FakeOpenAI() as server:
        server.handler = slow_jobs
        clawfile = FANOUT.format(url=server.base_url, key="CLAW_TEST_NOWHERE_KEY")
        root = make_project(tmp_path / "p", clawfile, {"inbox/m0.txt": "message\n"})
        done = claw_process(
            root,
            *on_cluster(ray_cluster, "run"),
            env={"CLAW_TEST_NOWHERE_KEY": "sk-only-on-the-coordinator-0123456789"},
            timeout=120,
        )
        assert done.returncode == 1, done.stderr
        assert "CLAW_TEST_NOWHERE_KEY is not set" in done.stderr
        assert server.requests == []
        assert "sk-only-on-the-coordinator" not in done.stderr


def test_an_address_where_no_cluster_listens_is_a_usage_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", FANOUT.format(url="http://127.0.0.1:9/v1", key=KEY_ENV))
    done = claw_process(root, "run", "--executor", "ray", "--address", "127.0.0.1:9", timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot connect to the Ray cluster at '127.0.0.1:9'" in done.stderr
    with sqlite3.connect(root / ".claw/state.db") as db:  # nothing ran: no run recorded
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_the_coordinator_killed_leaves_what_a_local_kill_leaves_and_the_next_run_finishes(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    items = 8
    with FakeOpenAI() as server:
        server.handler = slow_jobs
        inbox = {f"inbox/m{n}.txt": f"message {n}\n" for n in range(items)}
        root = make_project(tmp_path / "p", FANOUT.format(url=server.base_url, key=KEY_ENV), inbox)
        run = start_run(root, ray_cluster, "-j", str(items))
        try:
            wait_for(lambda: journalled(root) >= items, 120)  # the first turns paid
        finally:
            run.kill()  # kill -9 of `claw run`: its cluster tasks end with it
            run.communicate()
        time.sleep(8)  # what a task still running would have asked by now
        assert sum(turns(server).values()) == items
        assert not (root / "out").exists() or not list((root / "out").iterdir())
        args = on_cluster(ray_cluster, "run", "-j", str(items))
        again = claw_process(root, *args, env={"CLAW_NOW": NOW}, timeout=180)  # the same day
        assert again.returncode == 0, again.stderr
        for n in range(items):
            assert (root / f"out/m{n}.md").read_text() == f"done inbox/m{n}.txt\n"
        # the first turns the killed run paid for were replayed from the call cache's journal
        assert set(turns(server).values()) == {1} and len(turns(server)) == 2 * items
        with sqlite3.connect(root / ".claw/state.db") as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            ok = db.execute("SELECT count(*) FROM jobs WHERE status = 'ok'").fetchone()
        assert ok == (items,)

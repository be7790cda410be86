"""What the whole cluster shares, on a real two-node cluster (tests/cluster/conftest): slots,
breakers, budgets, the call cache, keys that never travel, cancel, a node lost, Ray missing."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import raywork
from fake_openai import FakeOpenAI, Reply, error, text
from raycluster import RayTestCluster

from claw_batch import cancel
from claw_batch.agent.budget import Spend
from claw_batch.cluster.connect import RayCluster, connect
from claw_batch.config import Budget, Clawfile, Price, Provider, Task
from claw_batch.errors import TaskFailed

pytestmark = pytest.mark.slow
DAY = "2026-01-01"


def _config(url: str, key_env: str = "CLAW_TEST_WORKER_KEY", **provider: Any) -> Clawfile:
    return Clawfile(
        tasks={"t": Task(budget=Budget(per_day=1.0))},
        providers={"p": Provider(base_url=url, api_key_env=key_env, **provider)},
        prices={"p/m": Price(1.0, 1.0)},
    )


def _connected(ray_cluster: RayTestCluster, config: Clawfile, **share: Any) -> RayCluster:
    cluster = connect(ray_cluster.executor(), say=lambda _: None)
    share.setdefault("spend", None)
    share.setdefault("cache_dir", None)
    cluster.share(config, day=DAY, **share)
    return cluster


class Counting:
    """A handler that answers after a pause and records how many calls were in at once."""

    def __init__(self, pause: float = 0.3) -> None:
        self.pause = pause
        self.now = 0
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.pause)
        with self.lock:
            self.now -= 1
        return text(f"answer to: {body['messages'][-1]['content']}")


def test_max_concurrency_is_one_slot_for_the_whole_cluster(ray_cluster: RayTestCluster) -> None:
    with FakeOpenAI() as srv:
        srv.handler = counting = Counting()
        cluster = _connected(ray_cluster, _config(srv.base_url, max_concurrency=1))
        try:
            calls = [
                cluster.call(raywork.ask, f"j{i}", cluster_config(srv), "p/m", f"q{i}", job=f"j{i}")
                for i in range(6)
            ]
            results = [c.result() for c in calls]
        finally:
            cluster.close()
    assert [r[0] for r in results] == [f"answer to: q{i}" for i in range(6)]
    assert len({r[1] for r in results}) == 2  # both nodes called
    assert counting.most == 1


def cluster_config(srv: FakeOpenAI, **provider: Any) -> Clawfile:
    return _config(srv.base_url, max_concurrency=1, **provider)


def test_a_429_seen_by_one_worker_makes_the_other_wait(ray_cluster: RayTestCluster) -> None:
    with FakeOpenAI() as srv:
        srv.enqueue(error(429, "slow down", retry_after=2))
        srv.handler = lambda body: text("ok")
        cluster = _connected(ray_cluster, _config(srv.base_url))
        try:
            first = cluster.call(raywork.ask, "a", _config(srv.base_url), "p/m", "a", job="a")
            time.sleep(0.5)  # ordering only: the 429 is taken first
            second = cluster.call(raywork.ask, "b", _config(srv.base_url), "p/m", "b", job="b")
            assert first.result()[0] == "ok" and second.result()[0] == "ok"
        finally:
            cluster.close()
    # the 429, then one probe and the other call after it: never two calls into the storm
    assert len(srv.requests) == 3


def test_a_per_day_cap_holds_for_two_workers_together(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    config = _config("http://127.0.0.1:9/v1")
    spend = Spend(config, lambda task, since: 0.0, dt.datetime(2026, 1, 1))
    cluster = _connected(ray_cluster, config, spend=spend)
    try:
        calls = [
            cluster.call(raywork.spend, f"s{i}", "t", "p/m", 0.3, job=f"s{i}") for i in range(6)
        ]
        said = [c.result() for c in calls]
    finally:
        cluster.close()
    assert said.count("ok") == 3  # 3 x 0.3 <= 1.0 < 4 x 0.3
    assert all("per_day" in s for s in said if s != "ok")


def test_a_reply_paid_on_a_worker_is_in_the_coordinators_cache_and_replayed(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    cache = tmp_path / ".claw" / "cache"
    with FakeOpenAI() as srv:
        srv.handler = lambda body: text("paid once")
        config = _config(srv.base_url)
        cluster = _connected(ray_cluster, config, cache_dir=cache)
        try:
            assert cluster.call(raywork.ask, "a", config, "p/m", "same", job="a").result()[0] == (
                "paid once"
            )
        finally:
            cluster.close()
        assert (cache / "calls.db").exists() and not list(cache.glob("journal-*"))
        cluster = _connected(ray_cluster, config, cache_dir=cache)
        try:
            again = cluster.call(raywork.ask, "b", config, "p/m", "same", job="b").result()
        finally:
            cluster.close()
    assert again[0] == "paid once"
    assert len(srv.requests) == 1


def test_keys_never_travel_the_workers_read_their_own(
    ray_cluster: RayTestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAW_TEST_COORDINATOR_KEY", "sk-coordinator-secret")
    with FakeOpenAI() as srv:
        srv.handler = lambda body: text("ok")
        on_coordinator = _config(srv.base_url, key_env="CLAW_TEST_COORDINATOR_KEY")
        on_workers = _config(srv.base_url)
        cluster = _connected(ray_cluster, on_coordinator)
        try:
            failed = cluster.call(raywork.ask, "a", on_coordinator, "p/m", "q", job="a")
            with pytest.raises(TaskFailed, match="CLAW_TEST_COORDINATOR_KEY is not set"):
                failed.result()
            assert (
                cluster.call(raywork.ask, "b", on_workers, "p/m", "q", job="b").result()[0] == "ok"
            )
        finally:
            cluster.close()
    sent = {k.lower(): v for k, v in srv.headers[-1].items()}
    assert sent["authorization"] == "Bearer sk-only-on-the-workers"
    assert all("sk-coordinator-secret" not in str(h) for h in srv.headers)


def test_ctrl_c_during_result_cancels_the_task(ray_cluster: RayTestCluster) -> None:
    cluster = _connected(ray_cluster, _config("http://127.0.0.1:9/v1"))
    try:
        call = cluster.call(raywork.node, "slow", 300.0, job="slow")
        while "slow" not in cluster.nodes_of():
            time.sleep(0.1)
        cancel.cancel()
        try:
            with pytest.raises(KeyboardInterrupt):
                call.result()
        finally:
            cancel.reset()
    finally:
        cluster.close()


def test_a_node_killed_mid_call_ray_runs_it_again_elsewhere_once(
    fresh_cluster: RayTestCluster,
) -> None:
    cluster = connect(fresh_cluster.executor(), say=lambda _: None)
    try:
        cluster.share(_config("http://127.0.0.1:9/v1"), spend=None, cache_dir=None, day=DAY)
        calls = [cluster.call(raywork.node, f"k{i}", 4.0, job=f"k{i}") for i in range(4)]
        deadline = time.monotonic() + 60
        while not any(
            "(" in n and n != _head(fresh_cluster, cluster) for n in cluster.nodes_of().values()
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        fresh_cluster.kill_node(2)
        nodes = [c.result() for c in calls]
    finally:
        cluster.close()
    assert len(nodes) == 4 and len(set(nodes)) == 1  # all on the head at the end


def _head(test_cluster: RayTestCluster, cluster: RayCluster) -> str:
    ray = cluster._ray
    head = ray.get_runtime_context().get_node_id()
    return f"127.0.0.1 ({head[:8]})"


def test_without_ray_executor_ray_is_a_usage_error(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from claw_batch.config import Executor\n"
        "from claw_batch.cluster.connect import connect\n"
        "from claw_batch.errors import UsageError\n"
        "try:\n    connect(Executor(kind='ray'), say=print)\n"
        "except UsageError as e:\n    print(e.exit_code, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("2 ") and "pip install 'claw-batch[ray]'" in out.stdout


def test_overhead_of_a_call_and_of_a_1mb_put_measured(ray_cluster: RayTestCluster) -> None:
    cluster = _connected(ray_cluster, _config("http://127.0.0.1:9/v1"))
    try:
        cluster.call(raywork.echo, 0, job="warm").result()
        start = time.perf_counter()
        for i in range(20):
            cluster.call(raywork.echo, i, job=f"e{i}").result()
        per_call = (time.perf_counter() - start) / 20
        blob = os.urandom(1 << 20)
        start = time.perf_counter()
        handle = cluster.put(blob)
        assert cluster.call(raywork.size, handle, job="size").result() == 1 << 20
        put_get = time.perf_counter() - start
    finally:
        cluster.close()
    print(f"\nray call round trip: {per_call * 1000:.1f} ms; 1 MB put+get: {put_get * 1000:.1f} ms")

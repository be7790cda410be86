"""The Ray executor's runtime on a real two-node cluster on loopback (tests/cluster/conftest)."""

from __future__ import annotations

import os

import pytest
from raycluster import RayTestCluster, loopback_only

from claw_batch.cluster.connect import connect

pytestmark = pytest.mark.slow


def test_a_call_round_trip_runs_on_both_nodes_and_stays_on_loopback(
    ray_cluster: RayTestCluster,
) -> None:
    import raywork

    cluster = connect(ray_cluster.executor(), say=lambda _: None)
    try:
        cluster.share(_config(), spend=None, cache_dir=None, day="2026-01-01")
        calls = [cluster.call(raywork.node, f"j{i}", 1.5, job=f"j{i}") for i in range(8)]
        nodes = {c.result() for c in calls}
        assert len(nodes) == 2 and all(n.startswith("127.0.0.1 (") for n in nodes)
        assert cluster.call(raywork.echo, {"a": [1, 2]}, job="e").result() == {"a": [1, 2]}
        assert loopback_only(ray_cluster, os.getpid()) > 10
    finally:
        cluster.close()
        cluster.close()  # idempotent


def _config() -> object:
    from claw_batch.config import Clawfile, Task

    return Clawfile(tasks={"t": Task()})

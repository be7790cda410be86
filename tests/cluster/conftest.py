"""The real two-node loopback Ray cluster the tests of this folder run on (raycluster)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from raycluster import RayTestCluster, start_cluster


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayTestCluster]:
    if shutil.which("ss") is None:
        pytest.fail("the cluster tests check sockets with `ss` (iproute2): install it")
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def fresh_cluster() -> Iterator[RayTestCluster]:
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.close()

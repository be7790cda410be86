"""Fixtures of the cluster-shipping tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def unconfined(monkeypatch: pytest.MonkeyPatch) -> None:
    """PROBE's bash runs unconfined on the worker, as a job out of its sandbox (or a worker
    that sends back anything) would: what the coordinator's checks must stop. A cluster run
    refuses `sandbox: none` (tests/shipped/test_refusals.py); the refusal is lifted here, in
    this process, so that such a job's changes reach `apply`."""
    from claw_batch.run import executor, remotejob, shipped

    real = executor.refused_on_cluster

    def lifted(task: Any) -> str | None:
        why = real(task)
        return None if why == executor.UNSANDBOXED_REFUSED else why

    for module in (executor, remotejob, shipped):
        monkeypatch.setattr(module, "refused_on_cluster", lifted)

"""Sending a notice through one delivery (config.Delivery): its shape for the target,
attempts with backoff, each cut at the delivery's timeout. Never raises for a delivery that
failed: the caller records what `Sent` says."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from claw_batch.config import Delivery
from claw_batch.notify.notice import Notice


@dataclass(frozen=True)
class Sent:
    target: str  # Delivery.target: nothing secret
    ok: bool
    attempts: int
    error: str | None = None  # the last attempt's, redacted


def send(
    delivery: Delivery,
    notice: Notice,
    *,
    environ: Mapping[str, str],
    redact: Callable[[str], str],
    sleep: Callable[[float], None] | None = None,
) -> Sent:
    """Deliver `notice`; up to 1 + delivery.retries attempts. `sleep` (tests) replaces the
    backoff's waits."""
    raise NotImplementedError  # claw_batch.notify (part A)


def preview(delivery: Delivery, notice: Notice) -> str:
    """What `claw run -n` prints for it: the target and the message's first line."""
    raise NotImplementedError  # claw_batch.notify (part A)

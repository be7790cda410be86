"""The run's clock and its id."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping

from claw_batch.errors import UsageError


def now_for_run(environ: Mapping[str, str]) -> dt.datetime:
    """The run's clock; CLAW_NOW (ISO 8601) pins it for reproducible demos and tests."""
    pinned = environ.get("CLAW_NOW")
    if pinned:
        try:
            when = dt.datetime.fromisoformat(pinned)
        except ValueError:
            raise UsageError(
                f"CLAW_NOW={pinned!r} is not an ISO 8601 time (e.g. 2026-11-22T23:00:00+01:00)"
            ) from None
        return when if when.tzinfo else when.astimezone()
    return dt.datetime.now().astimezone()


def new_run_id(now: dt.datetime) -> str:
    return now.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()

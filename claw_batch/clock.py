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


def shown(when: dt.datetime, tz: str | None = None) -> str:
    """A time as claw shows it to a person, everywhere: `2026-11-30 23:00`, on the clock it
    was read from (a run's times on the machine's, with the offset the ledger kept); a
    schedule's in its task's `tz:`, named after it: `2026-11-30 23:00 Europe/Berlin`.
    What a program reads (--json, the ledger) stays ISO 8601."""
    if tz is None:
        return f"{when:%Y-%m-%d %H:%M}"
    import zoneinfo  # for a schedule's time zone: not on every run's start-up

    return f"{when.astimezone(zoneinfo.ZoneInfo(tz)):%Y-%m-%d %H:%M} {tz}"


def shown_iso(text: str) -> str:
    """`shown` of an ISO 8601 time as the ledger or a lock file keeps it."""
    try:
        return shown(dt.datetime.fromisoformat(text))
    except ValueError:  # not one claw wrote: as it is
        return text

"""The run's clock, and the one way claw shows a time to a person (issue 16, point 11; the
slot messages that use it: tests/triggers/test_cron.py)."""

from __future__ import annotations

import datetime as dt

from claw_batch.clock import shown, shown_iso

BERLIN_NIGHT = dt.datetime.fromisoformat("2026-11-30T23:00:00+01:00")


def test_a_time_is_shown_to_the_minute_on_its_own_clock() -> None:
    assert shown(BERLIN_NIGHT) == "2026-11-30 23:00"
    assert shown_iso("2026-11-30T23:00:59.5+01:00") == "2026-11-30 23:00"
    assert shown_iso("not a time") == "not a time"


def test_a_schedule_time_is_in_its_task_zone_and_says_so() -> None:
    assert shown(BERLIN_NIGHT, "Europe/Berlin") == "2026-11-30 23:00 Europe/Berlin"
    assert shown(BERLIN_NIGHT, "America/New_York") == "2026-11-30 17:00 America/New_York"

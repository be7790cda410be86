"""The run's clock, and the one way claw shows a time to a person (issue 16, point 11)."""

from __future__ import annotations

import datetime as dt

from claw_batch.clock import shown, shown_iso
from claw_batch.triggers.cron import Due, Slot, describe_due

BERLIN_NIGHT = dt.datetime.fromisoformat("2026-11-30T23:00:00+01:00")


def test_a_time_is_shown_to_the_minute_on_its_own_clock() -> None:
    assert shown(BERLIN_NIGHT) == "2026-11-30 23:00"
    assert shown_iso("2026-11-30T23:00:59.5+01:00") == "2026-11-30 23:00"
    assert shown_iso("not a time") == "not a time"


def test_a_schedule_time_is_in_its_task_zone_and_says_so() -> None:
    assert shown(BERLIN_NIGHT, "Europe/Berlin") == "2026-11-30 23:00 Europe/Berlin"
    assert shown(BERLIN_NIGHT, "America/New_York") == "2026-11-30 17:00 America/New_York"


def test_every_slot_message_shows_times_one_way() -> None:
    """Slot names stay the ledger's keys (ISO-like, a UTC `Z` for slots every N minutes);
    the messages show the slot's time as every other command does."""
    every_half_hour = Slot("2026-11-30T22:30Z", dt.datetime(2026, 11, 30, 22, 30, tzinfo=dt.UTC))
    night = Slot("2026-11-30T23:00 Europe/Berlin", BERLIN_NIGHT.astimezone(dt.UTC))
    assert describe_due("poll", Due(every_half_hour, True, 2), "Europe/Berlin") == (
        "claw: poll: slot 2026-11-30 23:30 Europe/Berlin is due (2 missed slots collapsed into it)"
    )
    assert describe_due("t", Due(night, False, 0, first=night), "Europe/Berlin") == (
        "claw: t: first slot: next at 2026-11-30 23:00 Europe/Berlin"
    )
    assert describe_due("t", Due(night, False, 1), "Europe/Berlin") == (
        "claw: t: slot 2026-11-30 23:00 Europe/Berlin missed (over 15 min late, and 1 before it); "
        "not run"
    )
    machine = night.at.astimezone().strftime("%Y-%m-%d %H:%M")  # a task without tz:
    assert describe_due("t", Due(night, True, 0), None) == f"claw: t: slot {machine} is due"

"""When a scheduled task is due: its cron slots (croniter, in the task's `tz:`), and what
`claw run --due` does with the slots it finds — given the slots the ledger has already seen.

A slot is named by its wall-clock time in the task's zone when the expression names fixed
hours (so the daily 02:30 that a DST fall-back repeats is one slot, as in cron), and by its
UTC instant otherwise (every 30 minutes stays every 30 minutes across the change). A slot is
due when it is the most recent one, the ledger does not know its name, and it is later than
every slot the ledger has seen — so nothing runs twice after a restart or when the clock goes
back. Slots missed in between (machine off, claw not called) collapse into that one run
(`catch_up: once`) or are recorded as missed (`catch_up: skip`), the latest with them unless
it is at most LATE late. A task the ledger has never seen starts with a slot on time.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass

from claw_batch.clock import shown

LATE = dt.timedelta(minutes=15)  # catch_up: skip runs a slot at most this late
MAX_COUNTED = 10_000  # missed slots counted one by one up to this many


@dataclass(frozen=True)
class Slot:
    name: str  # what the ledger knows it by
    at: dt.datetime  # the instant, UTC


@dataclass(frozen=True)
class Due:
    slot: Slot  # the most recent slot
    run: bool  # run it now; else it is recorded as missed
    missed: int  # earlier slots since the last one seen, collapsed or skipped
    more: bool = False  # more than `missed` (counting stopped at MAX_COUNTED)
    # A schedule the ledger has never seen, whose latest slot is past: it starts with this.
    first: Slot | None = None


def zone(tz: str | None) -> dt.tzinfo:
    if tz is None:
        local = dt.datetime.now().astimezone().tzinfo
        assert local is not None
        return local
    return zoneinfo.ZoneInfo(tz)


def latest(expr: str, tz: str | None, now: dt.datetime) -> Slot:
    """The most recent slot at or before `now`."""
    from croniter import croniter  # lazily: only scheduled runs pay for it

    local = _clock(expr, tz, now)
    at = croniter(expr, local + dt.timedelta(microseconds=1)).get_prev(dt.datetime)
    return _slot(expr, tz, at)


def _clock(expr: str, tz: str | None, now: dt.datetime) -> dt.datetime:
    """`now` on the clock slots are read from. Fixed hours: the zone's wall clock (croniter
    takes a repeated wall time once, a skipped one at the next valid minute, as cron does).
    Every hour: the zone's current UTC offset, so that the hour a fall-back repeats has its
    slots too."""
    local = now.astimezone(zone(tz))
    if _fixed_hours(expr):
        return local
    offset = local.utcoffset()
    assert offset is not None
    return now.astimezone(dt.timezone(offset))


def _fixed_hours(expr: str) -> bool:
    return expr.split()[1] != "*"


def _slot(expr: str, tz: str | None, at: dt.datetime) -> Slot:
    utc = at.astimezone(dt.timezone.utc)
    if _fixed_hours(expr):
        return Slot(f"{at.strftime('%Y-%m-%dT%H:%M')} {tz or 'local'}", utc)
    return Slot(utc.strftime("%Y-%m-%dT%H:%MZ"), utc)


def due(
    expr: str,
    tz: str | None,
    now: dt.datetime,
    *,
    seen: Callable[[str], bool],
    last: dt.datetime | None,
    catch_up: str,
) -> Due | None:
    """What to do at `now`; None when the most recent slot needs nothing (already run or
    recorded, or not after the last slot seen). `seen`: whether the ledger knows a slot
    name; `last`: the latest instant the ledger has for the task."""
    slot = latest(expr, tz, now)
    if seen(slot.name) or (last is not None and slot.at <= last):
        return None
    missed, more = _between(expr, tz, last, slot) if last is not None else (0, False)
    on_time = now - slot.at <= LATE
    # A schedule never seen before starts with its next slot unless this one is on time:
    # adding a nightly task at 10:00 does not run last night's slot.
    run = on_time or (catch_up == "once" and last is not None)
    first = _next(expr, tz, now) if last is None and not run else None
    return Due(slot, run, missed, more, first)


def _next(expr: str, tz: str | None, now: dt.datetime) -> Slot:
    from croniter import croniter

    return _slot(expr, tz, croniter(expr, _clock(expr, tz, now)).get_next(dt.datetime))


def _between(expr: str, tz: str | None, last: dt.datetime, slot: Slot) -> tuple[int, bool]:
    """How many slots lie strictly between `last` and `slot` (repeated wall times once)."""
    from croniter import croniter

    it = croniter(expr, _clock(expr, tz, last))
    names: set[str] = set()
    while len(names) < MAX_COUNTED:
        at = it.get_next(dt.datetime)
        found = _slot(expr, tz, at)
        if found.at >= slot.at:
            return len(names - {slot.name}), False
        names.add(found.name)
    return len(names), True


def next_slot(expr: str, tz: str | None, now: dt.datetime) -> dt.datetime:
    """The next slot after `now`, UTC: when `claw schedule` wakes up."""

    return _next(expr, tz, now).at


def describe_due(task: str, found: Due, tz: str | None) -> str:
    """The progress line: what --due does with a task's slot, its time shown as claw shows
    every time (claw_batch.clock.shown), in the task's `tz:`."""
    when = describe_slot(found.slot, tz)
    missed = f"{found.missed}{'+' if found.more else ''}"
    if found.run:
        earlier = f" ({missed} missed slot{'s' if found.missed != 1 else ''} collapsed into it)"
        return f"claw: {task}: slot {when} is due{earlier if found.missed else ''}"
    if found.first is not None:  # not a miss: the task was not scheduled then
        return f"claw: {task}: first slot: next at {describe_slot(found.first, tz)}"
    earlier = f", and {missed} before it" if found.missed else ""
    late = int(LATE.total_seconds() // 60)
    return f"claw: {task}: slot {when} missed (over {late} min late{earlier}); not run"


def describe_slot(slot: Slot, tz: str | None) -> str:
    """A slot's time for a person (its name is the ledger's key): in the task's zone, named;
    without `tz:`, on the machine's clock."""
    return shown(slot.at, tz) if tz else shown(slot.at.astimezone())

"""Schedules: which slot is due, with a fake clock, and `claw run --due` over the real ledger."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

from claw_batch.triggers.cron import Due, Slot, describe_due, due

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
MINUTE = dt.timedelta(minutes=1)


@dataclass
class Ledger:
    """What the slots table holds, in memory: enough to drive `due` minute by minute."""

    names: set[str] = field(default_factory=set)
    last: dt.datetime | None = None
    runs: list[tuple[dt.datetime, Due]] = field(default_factory=list)
    missed: list[Due] = field(default_factory=list)

    def tick(
        self, expr: str, now: dt.datetime, catch_up: str = "once", tz: str = "Europe/Berlin"
    ) -> Due | None:
        found = due(expr, tz, now, seen=self.names.__contains__, last=self.last, catch_up=catch_up)
        if found is not None:
            self.names.add(found.slot.name)
            self.last = max(self.last or found.slot.at, found.slot.at)
            (self.runs.append((now, found)) if found.run else self.missed.append(found))
        return found

    def every_minute(self, expr: str, start: dt.datetime, end: dt.datetime, **kw: str) -> None:
        now = start
        while now < end:
            self.tick(expr, now, **kw)
            now += MINUTE


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=BERLIN)


def test_a_new_schedule_starts_with_a_slot_on_time() -> None:
    ledger = Ledger()
    assert ledger.tick("0 23 * * *", at(2026, 11, 22, 10, 0)) is not None
    assert (ledger.runs, [d.slot.name for d in ledger.missed]) == (
        [],
        ["2026-11-21T23:00 Europe/Berlin"],
    )
    assert ledger.tick("0 23 * * *", at(2026, 11, 22, 23, 14)) is not None
    assert len(ledger.runs) == 1


def test_every_minute_for_a_day_runs_each_slot_once() -> None:
    nightly, quarter = Ledger(), Ledger()
    nightly.every_minute("0 23 * * *", at(2026, 11, 22, 0, 0), at(2026, 11, 23, 0, 0))
    quarter.every_minute("*/15 * * * *", at(2026, 11, 22, 0, 0), at(2026, 11, 23, 0, 0))
    assert [(when, d.slot.name) for when, d in nightly.runs] == [
        (at(2026, 11, 22, 23, 0), "2026-11-22T23:00 Europe/Berlin")
    ]
    assert len(quarter.runs) == 96
    assert all(when == d.slot.at for when, d in quarter.runs)  # on time, to the minute
    assert {d.missed for _, d in quarter.runs} == {0}


def test_three_days_off_collapse_into_one_run_or_are_recorded_missed() -> None:
    for catch_up in ("once", "skip"):
        ledger = Ledger()
        assert ledger.tick("0 23 * * *", at(2026, 11, 22, 23, 1), catch_up) is not None
        found = ledger.tick("0 23 * * *", at(2026, 11, 26, 9, 0), catch_up)  # back on Thursday
        assert found is not None
        assert found.slot.name == "2026-11-25T23:00 Europe/Berlin"
        assert found.missed == 2  # Monday's and Tuesday's
        assert found.run is (catch_up == "once")  # skip: 10 hours late is missed too
    ledger = Ledger()
    ledger.tick("0 23 * * *", at(2026, 11, 22, 23, 1), "skip")
    found = ledger.tick("0 23 * * *", at(2026, 11, 25, 23, 10), "skip")  # in time for this one
    assert found is not None and found.run and found.missed == 2


def test_a_restart_right_after_a_run_runs_nothing() -> None:
    ledger = Ledger()
    assert ledger.tick("0 23 * * *", at(2026, 11, 22, 23, 0)) is not None
    assert ledger.tick("0 23 * * *", at(2026, 11, 22, 23, 0)) is None
    assert ledger.tick("0 23 * * *", at(2026, 11, 22, 23, 0, 30)) is None


def test_a_clock_set_back_an_hour_runs_nothing_twice() -> None:
    ledger = Ledger()
    ledger.every_minute("0 23 * * *", at(2026, 11, 22, 22, 0), at(2026, 11, 22, 23, 30))
    ledger.every_minute("0 23 * * *", at(2026, 11, 22, 22, 30), at(2026, 11, 23, 0, 0))  # again
    assert len(ledger.runs) == 1
    ledger.every_minute("*/10 * * * *", at(2026, 11, 22, 22, 0), at(2026, 11, 22, 23, 0))
    before = len(ledger.runs)
    ledger.every_minute("*/10 * * * *", at(2026, 11, 22, 22, 0), at(2026, 11, 22, 23, 0))
    assert len(ledger.runs) == before


def test_dst_in_the_tasks_zone() -> None:
    spring = Ledger()  # 2026-03-29: 02:00 -> 03:00, no 02:30 that night
    spring.every_minute("30 2 * * *", at(2026, 3, 28, 12, 0), at(2026, 3, 30, 12, 0))
    assert [d.slot.name for _, d in spring.runs] == [
        "2026-03-29T03:00 Europe/Berlin",
        "2026-03-30T02:30 Europe/Berlin",
    ]
    fall = Ledger()  # 2026-10-25: 03:00 -> 02:00, 02:30 happens twice
    start = dt.datetime(2026, 10, 24, 10, 0, tzinfo=dt.timezone.utc)
    now = start
    while now < start + dt.timedelta(hours=30):
        fall.tick("30 2 * * *", now)
        now += MINUTE
    assert [d.slot.name for _, d in fall.runs] == ["2026-10-25T02:30 Europe/Berlin"]
    halves = Ledger()  # every 30 minutes stays every 30 minutes of real time: 25 hours
    day = dt.datetime(2026, 10, 24, 22, 0, tzinfo=dt.timezone.utc)  # 00:00 local, +02:00
    now = day
    while now < day + dt.timedelta(hours=25):
        halves.tick("*/30 * * * *", now)
        now += MINUTE
    assert len(halves.runs) == 50


# --- claw run --due over the real ledger ----------------------------------------------------

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      nightly:
        prompt: "Summarise {{ today }}"
        output: "reports/{{ today }}.md"
        schedule: "0 23 * * *"
        tz: Europe/Berlin
        tools: []
      weekly:
        prompt: "Weekly"
        output: weekly.md
        schedule: "0 9 * * 1"
        tz: Europe/Berlin
        catch_up: skip
        tools: []
      adhoc:
        prompt: "Not scheduled"
        output: adhoc.md
        tools: []
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        srv.handler = lambda body: text("done")
        yield srv


def due_run(root: Path, server: FakeOpenAI, when: str, *args: str) -> tuple[int, str, list[str]]:
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": when}
    r = claw(root, "run", "--due", "--json", *args, env=env)
    jobs = [j["task"] for j in json.loads(r.stdout)["jobs"]] if r.stdout.strip() else []
    return r.exit_code, r.stderr, jobs


def slots(root: Path) -> list[tuple[str, str, str, int]]:
    with sqlite3.connect(root / ".claw" / "state.db") as db:
        return db.execute(
            "SELECT task, slot, status, missed FROM slots ORDER BY at, task"
        ).fetchall()


def test_claw_run_due_runs_each_slot_once(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    code, err, jobs = due_run(root, server, "2026-11-23T23:05:00+01:00")  # a Monday night
    assert (code, jobs) == (0, ["nightly"])
    assert "nightly: slot 2026-11-23 23:00 Europe/Berlin is due" in err
    # 09:00 today is 14 h late, from before the task was ever seen: not a miss (issue 16, 11)
    assert "claw: weekly: first slot: next at 2026-11-30 09:00 Europe/Berlin" in err
    assert (root / "reports/2026-11-23.md").is_file()
    calls = len(server.requests)

    for again in (
        "2026-11-23T23:05:00+01:00",
        "2026-11-23T23:59:00+01:00",
        "2026-11-23T22:30:00+01:00",
    ):
        code, err, jobs = due_run(root, server, again)  # a restart; later; the clock set back
        assert (code, err, jobs) == (0, "", [])
    assert len(server.requests) == calls

    code, err, jobs = due_run(root, server, "2026-11-26T09:00:00+01:00")  # off two nights
    assert (code, jobs) == (0, ["nightly"])
    assert "1 missed slot collapsed into it" in err  # Tuesday's
    assert slots(root) == [
        ("weekly", "2026-11-23T09:00 Europe/Berlin", "missed", 0),
        ("nightly", "2026-11-23T23:00 Europe/Berlin", "ok", 0),
        ("nightly", "2026-11-25T23:00 Europe/Berlin", "ok", 1),
    ]


def test_due_with_a_target_a_dry_run_and_a_failure(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    code, err, jobs = due_run(root, server, "2026-11-30T09:01:00+01:00", "-n")
    assert (code, jobs) == (0, ["weekly"])  # nightly: last night's slot is 10 h past
    # Issue 16, point 11: a slot from before the task was scheduled is not a miss.
    assert "claw: nightly: first slot: next at 2026-11-30 23:00 Europe/Berlin" in err
    assert "missed" not in err
    assert not (root / ".claw" / "state.db").exists()  # a dry run records nothing

    server.handler = lambda body: text("")  # an empty answer fails the job
    code, err, jobs = due_run(root, server, "2026-11-30T09:01:00+01:00", "weekly")
    assert (code, jobs) == (1, ["weekly"])
    server.handler = lambda body: text("done")
    code, _err, jobs = due_run(root, server, "2026-11-30T09:02:00+01:00", "weekly")
    assert (code, jobs) == (0, [])  # a slot runs at most once, failed or not
    assert slots(root) == [("weekly", "2026-11-30T09:00 Europe/Berlin", "failed", 0)]


NIGHT = dt.datetime.fromisoformat("2026-11-30T23:00:00+01:00")


def test_every_slot_message_shows_times_one_way() -> None:
    """Slot names stay the ledger's keys (ISO-like, a UTC `Z` for slots every N minutes);
    the messages show the slot's time as every other command does."""
    every_half_hour = Slot("2026-11-30T22:30Z", dt.datetime(2026, 11, 30, 22, 30, tzinfo=dt.UTC))
    night = Slot("2026-11-30T23:00 Europe/Berlin", NIGHT.astimezone(dt.UTC))
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


def test_an_unset_key_leaves_the_slot_for_the_next_due_run(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """Issue 16 (new users): cron without the key variable exits 2 before any job; the slot is
    not spent, so the next minute's `--due`, with the key, runs it."""
    root = make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: local/qwen
        providers:
          local: {{base_url: "{server.base_url}", api_key_env: MY_LOCAL_KEY}}
        tasks:
          nightly:
            prompt: "Summarise"
            output: night.md
            schedule: "30 2 * * *"
            tz: UTC
            tools: []
        """,
    )
    r = claw(root, "run", "--due", env={"CLAW_NOW": "2026-11-29T02:30:20+00:00"})
    assert (r.exit_code, r.stderr) == (
        2,
        "claw: nightly: slot 2026-11-29 02:30 UTC is due\n"
        "claw: nightly: slot 2026-11-29 02:30 UTC not run; left for the next claw run --due\n"
        "claw: environment variable MY_LOCAL_KEY is not set: provider 'local' reads its API "
        "key from it (api_key_env), for tasks nightly; set it (export MY_LOCAL_KEY=...) or run "
        "with --replay\n",
    )
    assert server.requests == []
    assert slots(root) == []

    env = {"CLAW_NOW": "2026-11-29T02:31:20+00:00", "MY_LOCAL_KEY": "sk-local-0123456789"}
    r = claw(root, "run", "--due", env=env)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith("claw: nightly: slot 2026-11-29 02:30 UTC is due\n"), r.stderr
    assert (root / "night.md").read_text() == "done\n"
    assert slots(root) == [("nightly", "2026-11-29T02:30 UTC", "ok", 0)]

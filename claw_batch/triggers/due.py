"""`claw run --due` and `claw schedule`: of the scheduled tasks, those whose latest slot
needs something — to run, or to be recorded as missed — chosen under the project lock, the
slots written before anything runs and finished after (claw_batch.triggers.slots)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable

from claw_batch.config import Clawfile
from claw_batch.errors import Interrupted
from claw_batch.plan.jobs import select_tasks
from claw_batch.run.results import RUN_STATUS, RunSummary
from claw_batch.run.runner import Chosen, exit_code
from claw_batch.store.state import State
from claw_batch.triggers.cron import describe_due, describe_slot, due
from claw_batch.triggers.slots import Entry, Slots


class DueSlots:
    """A run's `Selection` (claw_batch.run.runner) by schedule slot."""

    def candidates(self, config: Clawfile, targets: tuple[str, ...]) -> list[str]:
        """The scheduled tasks among the targets (all of them without targets)."""
        chosen = select_tasks(config, targets) if targets else config.tasks
        return [name for name in chosen if config.tasks[name].schedule]

    def choose(
        self,
        config: Clawfile,
        state: State | None,
        names: list[str],
        now: dt.datetime,
        run_id: str,
        *,
        dry_run: bool,
        say: Callable[[str], None],
    ) -> Chosen:
        """Each task's latest slot that needs something; recorded before anything runs
        (not in a dry run)."""
        slots = Slots(state, readonly=dry_run)
        entries = []
        for name in names:
            task = config.tasks[name]
            assert task.schedule is not None
            found = due(
                task.schedule,
                task.tz,
                now,
                seen=functools.partial(slots.seen, name),
                last=slots.last(name),
                catch_up=task.catch_up,
            )
            if found is not None:
                entries.append(Entry(name, found))
        for e in entries:
            say(describe_due(e.task, e.due, config.tasks[e.task].tz))
        if entries and not dry_run:
            slots.record(entries, run_id, now)
        ran = [e for e in entries if e.due.run]
        if dry_run:
            return Chosen([e.task for e in ran], _nothing)
        leave = functools.partial(_leave, slots, ran, config, say)
        return Chosen([e.task for e in ran], functools.partial(_finish, slots, ran), leave)


def _finish(slots: Slots, ran: list[Entry], summary: RunSummary) -> None:
    """Each slot that ran gets its status (what the run's jobs of its task came to)."""
    for e in ran:
        results = [r for r in summary.results if r.job.task == e.task]
        code = exit_code(results) if results else summary.exit_code or Interrupted.exit_code
        slots.finish(e.task, e.due.slot.name, RUN_STATUS.get(code, "error"))


def _leave(slots: Slots, ran: list[Entry], config: Clawfile, say: Callable[[str], None]) -> None:
    """A run stopped before any job (an unset key): its slots were not spent. They were
    written before the check, as always, and are taken back, so the next --due runs them."""
    slots.forget(ran)
    for e in ran:
        when = describe_slot(e.due.slot, config.tasks[e.task].tz)
        say(f"claw: {e.task}: slot {when} not run; left for the next claw run --due")


def _nothing(summary: RunSummary) -> None:
    """A dry run records no slot."""

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
from claw_batch.run.closeout import RUN_STATUS
from claw_batch.run.results import RunSummary
from claw_batch.run.runner import exit_code
from claw_batch.store.state import State
from claw_batch.triggers.cron import describe_due, due
from claw_batch.triggers.slots import Entry, Slots


class DueSlots:
    """A run's `Selection` (claw_batch.run.runner) by schedule slot; one per run at a time."""

    def __init__(self) -> None:
        self.config: Clawfile | None = None
        self.slots: Slots | None = None
        self.entries: list[Entry] = []
        self.dry_run = True

    def candidates(self, config: Clawfile, targets: tuple[str, ...]) -> list[str]:
        """The scheduled tasks among the targets (all of them without targets)."""
        self.config = config
        chosen = select_tasks(config, targets) if targets else config.tasks
        return [name for name in chosen if config.tasks[name].schedule]

    def choose(
        self,
        state: State | None,
        names: list[str],
        now: dt.datetime,
        run_id: str,
        *,
        dry_run: bool,
        say: Callable[[str], None],
    ) -> list[str]:
        """Each task's latest slot that needs something; recorded before anything runs
        (not in a dry run)."""
        assert self.config is not None, "candidates() first"
        self.dry_run = dry_run
        self.slots = slots = Slots(state, readonly=self.dry_run)
        self.entries = []
        for name in names:
            task = self.config.tasks[name]
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
                self.entries.append(Entry(name, found))
        for e in self.entries:
            say(describe_due(e.task, e.due))
        if self.entries and not self.dry_run:
            slots.record(self.entries, run_id, now)
        return [e.task for e in self.entries if e.due.run]

    def finish(self, summary: RunSummary) -> None:
        """Each slot that ran gets its status (what the run's jobs of its task came to)."""
        if self.dry_run or self.slots is None:
            return
        for e in self.entries:
            if not e.due.run:
                continue
            results = [r for r in summary.results if r.job.task == e.task]
            code = exit_code(results) if results else summary.exit_code or Interrupted.exit_code
            self.slots.finish(e.task, e.due.slot.name, RUN_STATUS.get(code, "error"))

"""`claw schedule`: a foreground scheduler for systemd or a terminal. It runs what `claw run
--due` would, then sleeps until the next slot of any scheduled task, and again — with the
same slot ledger, so it and a crontab calling `--due` never run a slot twice between them.
One run at a time (single flight per task); SIGTERM or Ctrl-C while it sleeps ends it with
exit 0; during a run it cancels the run like `claw run` does (exit 130)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from claw_batch import cancel
from claw_batch.clock import now_for_run, shown
from claw_batch.config import Project, Task
from claw_batch.errors import Interrupted, UsageError, said
from claw_batch.figures import count
from claw_batch.plan.jobs import select_tasks
from claw_batch.run.runner import Runner, RunOptions
from claw_batch.terminal.progress import Progress
from claw_batch.triggers import cron

RETRY = dt.timedelta(seconds=30)  # after a run that found the project locked (exit 75)


@dataclass(frozen=True)
class Clock:
    """The loop's time: the real one, or a fake that tests advance."""

    now: Callable[[], dt.datetime]
    sleep: Callable[[float], None]
    pinned: bool = False  # pass the time to each run as CLAW_NOW (a fake clock)


def real_clock(environ: Mapping[str, str]) -> Clock:
    return Clock(lambda: now_for_run(environ), cancel.sleep)


def serve(
    project: Project,
    options: RunOptions,
    *,
    progress: Progress,
    environ: Mapping[str, str],
    clock: Clock,
    until: dt.datetime | None = None,  # tests: stop when the clock passes it
) -> int:
    config = project.config
    options = dataclasses.replace(options, trigger="schedule")
    names = select_tasks(config, options.targets) if options.targets else list(config.tasks)
    scheduled = {n: config.tasks[n] for n in names if config.tasks[n].schedule}
    if not scheduled:
        raise UsageError("no task has a schedule: nothing for claw schedule to do")
    progress.message(
        f"claw schedule: {count(len(scheduled), 'scheduled task')}: {', '.join(scheduled)}"
    )
    while True:
        now = clock.now()
        env = {**environ, "CLAW_NOW": now.isoformat()} if clock.pinned else environ
        summary = Runner(project, options, progress=progress, environ=env).run()
        progress.finish()
        if summary.error:
            progress.message(said(summary.error))
        if summary.exit_code == Interrupted.exit_code:
            return summary.exit_code
        after = clock.now()
        slot, names = _next_slot(scheduled, after)
        wake = min(slot, after + RETRY) if summary.exit_code == 75 else slot
        if until is not None and wake > until:
            return 0
        if wake == slot:
            tz = scheduled[names[0]].tz  # shown as --due shows it: in the task's zone, named
            progress.message(f"claw schedule: next slot {_shown(slot, tz)} ({', '.join(names)})")
        try:
            clock.sleep(max((wake - after).total_seconds(), 0.0))
        except KeyboardInterrupt:
            progress.message("claw schedule: stopped")
            return 0


def _next_slot(scheduled: Mapping[str, Task], after: dt.datetime) -> tuple[dt.datetime, list[str]]:
    """The next slot of any scheduled task after `after`, and the tasks it is a slot of."""
    slots = {n: cron.next_slot(t.schedule or "", t.tz, after) for n, t in scheduled.items()}
    first = min(slots.values())
    return first, [n for n, at in slots.items() if at == first]


def _shown(at: dt.datetime, tz: str | None) -> str:
    return shown(at, tz) if tz else shown(at.astimezone())

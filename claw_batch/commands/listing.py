from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from claw_batch.commands.common import handle_errors, load, project_options, quiet_option
from claw_batch.safety.onscreen import visible

if TYPE_CHECKING:
    from claw_batch.run.results import JobResult

# How `claw why` begins the reason of a job that never ran, and of one that failed last time
# (claw_batch.plan.uptodate, store.lastrun): the plan is imported only when a command runs.
NEVER_RAN = "never ran"
FAILED = "failed in run "


@click.command("list")
@project_options
@quiet_option("Leave out the line of each task's triggers.")
@handle_errors
def list_tasks(directory: Path | None, file: Path | None, quiet: bool) -> int:
    """List the tasks and their state.

    In the clawfile's order: each task's name, its state (up to date, never ran, 2/5 to
    run, modified…) and description, and below them its triggers (schedule, watch, hook,
    foreach). No model calls.

    \b
    Examples:
      claw list
      claw list -q -C ~/notes
    """
    from claw_batch.commands.plan import dry_run
    from claw_batch.run.lock import read_holder

    project = load(directory, file, cache="create")
    holder = read_holder(project.root)
    if holder is not None:
        click.echo(visible(f"claw: a run is in progress, {holder.describe()}"), err=True)
    summary = dry_run(project, tuple(project.config.tasks), False, detail=False)
    jobs: dict[str, list[JobResult]] = {name: [] for name in project.config.tasks}
    for r in summary.results:  # read once: a large run's results come back from disk
        jobs[r.job.task].append(r)
    state = {name: _state(jobs[name]) for name in project.config.tasks}
    rows = []
    for name, task in project.config.tasks.items():
        triggers: list[str] = []
        if task.schedule:
            triggers.append(f"schedule {task.schedule}")
        if task.watch:
            triggers.append("watch " + " ".join(task.watch))
        if task.hook:
            triggers.append(f"hook {task.hook}")
        if task.foreach:
            triggers.append(f"foreach {task.foreach}")
        if name in project.config.delegators:
            triggers.append("delegated by " + ", ".join(project.config.delegators[name]))
        shown = ", ".join(triggers)
        rows.append((name, state[name], shown, task.description))
    width = max((len(r[0]) for r in rows), default=0)
    for name, status, shown, description in rows:
        click.echo(visible(f"{name:<{width}}  {status:<13}  {description}"))
        if shown and not quiet:
            click.echo(visible(f"{'':<{width}}  {'':<13}  ({shown})"))
    return 0


def _state(mine: Sequence[JobResult]) -> str:
    """`up to date`, `never ran`, `failed`, `2/5 to run`, `modified`… for one task's
    jobs. `failed`: each job to run failed the last time (a check, its verdict remembered
    or not), as `claw why` says."""
    statuses = [r.status for r in mine]
    if not statuses:
        return "no items"
    to_run = statuses.count("would-run")
    if to_run == 0:
        return "modified" if "modified" in statuses else "up to date"
    if to_run == len(statuses):
        if all(r.reason and r.reason.startswith(NEVER_RAN) for r in mine):
            return "never ran"
        if all(r.remembered or (r.reason or "").startswith(FAILED) for r in mine):
            return "failed" if to_run == 1 else f"{to_run} failed"
    return "to run" if len(statuses) == 1 else f"{to_run}/{len(statuses)} to run"

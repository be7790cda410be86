from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from claw_batch.commands.common import handle_errors, load, project_options
from claw_batch.errors import said
from claw_batch.safety.onscreen import visible

if TYPE_CHECKING:
    from claw_batch.config import Project
    from claw_batch.run.results import RunSummary

LABELS = {
    "would-run": "run",
    "up-to-date": "up to date",
    "modified": "kept",
    "skipped": "skip",
}


def dry_run(
    project: Project, targets: tuple[str, ...], force: bool, *, detail: bool = True
) -> RunSummary:
    """What `claw run -n` finds; without `detail`, a job that runs whatever it is (it never
    succeeded) is not prepared: no prompt estimate, no output path (`claw list`)."""
    from claw_batch.run.runner import Runner, RunOptions
    from claw_batch.terminal.progress import Progress

    options = RunOptions(
        targets=targets,
        dry_run=True,
        detail=detail,
        force=force,
        keep_going=True,
        notify=False,  # its progress is quiet: `claw run -n` says what would be sent
    )
    return Runner(project, options, progress=Progress(quiet=True)).run()


@click.command()
@click.argument("targets", nargs=-1, metavar="[TASK|GLOB]...")
@click.option("-B", "--force", is_flag=True, help="Plan as if every job were forced.")
@project_options
@handle_errors
def plan(targets: tuple[str, ...], force: bool, directory: Path | None, file: Path | None) -> int:
    """Say what `claw run` would run, and why.

    The same as `claw run -n`: each job of the tasks (and of the tasks they need), whether
    it would run, is up to date, or is kept (its output was edited by hand; -B overwrites
    it), the estimated size of its first prompt, and the reasons. No model calls; no
    writes but claw's caches of the clawfile and the skills.

    \b
    Examples:
      claw plan                   the default tasks
      claw plan 'digest-*' -B     as if every job of those tasks were forced
    """
    project = load(directory, file, cache="write")
    summary = dry_run(project, targets, force)
    if project.config.executor.remote and not summary.error:  # never connected: only said
        from claw_batch.run.executorcheck import origin, where

        told = origin(None, project.clawfile.name)
        cluster = where(project.config.executor)
        click.echo(f"claw: the jobs would run on {cluster} ({told})", err=True)
    if summary.error:
        click.echo(visible(said(summary.error)), err=True)
        return summary.exit_code
    width = max((len(r.job.name) for r in summary.results), default=0)
    for r in summary.results:
        label = LABELS.get(r.status, r.status)
        size = f"~{r.prompt_estimate:,} tok" if r.prompt_estimate is not None else ""
        line = f"{label:<10}  {r.job.name:<{width}}  {size:>11}  {'; '.join(r.reasons)}"
        click.echo(visible(line.rstrip()))  # items, and reasons quoting a verdict
    return 0


@click.command()
@click.argument("task")
@project_options
@handle_errors
def why(task: str, directory: Path | None, file: Path | None) -> int:
    """Say why each job of a task would (not) run.

    Each job of TASK, then its reasons: it never ran, an input changed, the prompt or the
    model changed, a task it needs has a new result, its output is missing or was edited…

    \b
    Example:
      claw why triage
    """
    summary = dry_run(load(directory, file, cache="write"), (task,), False)
    if summary.error:
        click.echo(visible(said(summary.error)), err=True)
        return summary.exit_code
    for r in summary.results:
        if r.job.task != task:
            continue
        verdict = "would run" if r.status == "would-run" else LABELS.get(r.status, r.status)
        if r.remembered:
            verdict = "would fail again, without a model call"
        click.echo(visible(f"{r.job.name}: {verdict}"))
        for reason in r.reasons or ("nothing it depends on changed since it last succeeded",):
            click.echo(visible(f"  - {reason}"))  # a remembered verdict's summary
    return 0

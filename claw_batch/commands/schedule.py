from __future__ import annotations

import os
from pathlib import Path

import click

from claw_batch.commands.common import (
    handle_errors,
    jobs_option,
    load,
    output_options,
    project_options,
    stop_on_sigterm,
    typed,
)


@click.command()
@click.argument("targets", nargs=-1, metavar="[TASK|GLOB]...")
@jobs_option
@click.option("-k", "--keep-going", is_flag=True, help="Go on with other jobs after a failure.")
@project_options
@output_options
@handle_errors
def schedule(
    targets: tuple[str, ...],
    jobs: int,
    keep_going: bool,
    directory: Path | None,
    file: Path | None,
    verbose: bool,
    quiet: bool,
) -> int:
    """Run scheduled tasks on time, in the foreground.

    For a terminal or a systemd service: each scheduled task (all of them, or the TASKs)
    runs once per slot of its `schedule:`, through the same slot ledger as `claw run --due`,
    so the two never run a slot twice. SIGTERM or Ctrl-C stops it.

    \b
    Examples:
      claw schedule
      claw schedule 'report-*' -j 4
    """
    from claw_batch.run.runner import RunOptions
    from claw_batch.terminal.progress import Progress
    from claw_batch.triggers.due import DueSlots
    from claw_batch.triggers.schedule import real_clock, serve

    project = load(directory, file, cache="write")
    options = RunOptions(
        targets=targets, jobs=jobs, keep_going=keep_going, select=DueSlots(), argv=typed()
    )
    stop_on_sigterm()
    environ = dict(os.environ)
    with Progress(quiet=quiet, verbose=verbose) as progress:  # a clean terminal at the end
        return serve(
            project, options, progress=progress, environ=environ, clock=real_clock(environ)
        )

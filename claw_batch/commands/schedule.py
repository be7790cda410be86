from __future__ import annotations

import os
from pathlib import Path

import click

from claw_batch.commands.common import (
    handle_errors,
    load,
    project_options,
    stop_on_sigterm,
    typed,
)


@click.command()
@click.argument("targets", nargs=-1)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("-k", "--keep-going", is_flag=True, help="Go on with other jobs after a failure.")
@project_options
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
    """Run scheduled tasks at their times, in the foreground (for systemd or a terminal).

    Uses the same slot ledger as `claw run --due`; SIGTERM stops it cleanly.
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

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
@click.option(
    "--settle",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="How long a file must go unwritten before its job starts.",
)
@click.option(
    "--rescan",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="How often to look for files the OS did not report.",
)
@click.option("--model", help="Use this model for every task.")
@click.option(
    "--no-notify", is_flag=True, help="Send no notice (notify:) and record none for its runs."
)
@project_options
@output_options
@handle_errors
def watch(
    targets: tuple[str, ...],
    jobs: int,
    settle: float,
    rescan: float,
    model: str | None,
    no_notify: bool,
    directory: Path | None,
    file: Path | None,
    verbose: bool,
    quiet: bool,
) -> int:
    """Run watch tasks as files arrive.

    Watches the folders of the watch tasks (all of them, or the TASKs) and runs one job
    per file that arrives or changes, once it has settled, through the same engine as
    `claw run` (fingerprints, the project lock, -j jobs at a time); the same content is
    processed once per task. Files already there are processed at start. SIGTERM or
    Ctrl-C stops it.

    \b
    Examples:
      claw watch
      claw watch triage -j 4 --settle 2
    """
    from claw_batch.run.runner import RunOptions
    from claw_batch.terminal.progress import Progress
    from claw_batch.triggers.watch import Watcher, WatchOptions

    project = load(directory, file, cache="write")
    options = RunOptions(
        targets=targets,
        jobs=jobs,
        keep_going=True,
        model=model,
        argv=typed(),
        notify=not no_notify,
    )
    stop_on_sigterm()
    with Progress(quiet=quiet, verbose=verbose) as progress:  # a clean terminal at the end
        watcher = Watcher(
            project,
            options,
            WatchOptions(settle=settle, rescan=rescan),
            progress=progress,
            environ=dict(os.environ),
            reload=lambda: load(directory, file, cache="write"),
        )
        return watcher.serve()

from __future__ import annotations

from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("task", required=False)
@project_options
@handle_errors
def show(
    run_id: str,
    task: str | None,
    directory: Path | None,
    file: Path | None,
    verbose: bool,
    quiet: bool,
) -> int:
    """Show a run's transcripts readably. RUN is a run id or `last`."""
    from claw_batch.report.show import show as render

    project = load(directory, file)
    click.echo(render(project.root, run_id, task))
    return 0

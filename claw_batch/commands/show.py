from __future__ import annotations

from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("task", required=False)
@project_options
@handle_errors
def show(run_id: str, task: str | None, directory: Path | None, file: Path | None) -> int:
    """Show a run's transcripts.

    RUN is a run id (`claw log` lists them) or `last`, the newest run that ran a job; with
    TASK, only that task's jobs. Each model turn, tool call and result, readably; a
    remembered verdict says whose it is and where its transcript is.

    \b
    Examples:
      claw show last
      claw show last triage
    """
    from claw_batch.report.show import show as render

    project = load(directory, file)
    click.echo(render(project.root, run_id, task))
    return 0

from __future__ import annotations

from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options


@click.group()
def cron() -> None:
    """Print crontab lines for scheduled tasks.

    Or systemd units: they run `claw run --due` every minute, which runs each scheduled
    task once per slot.
    """


@cron.command("print")
@click.option("--systemd", is_flag=True, help="Print a systemd service and timer instead.")
@click.option("--name", default="claw", show_default=True, help="The systemd units' name.")
@project_options
@handle_errors
def print_(systemd: bool, name: str, directory: Path | None, file: Path | None) -> int:
    """Print the crontab lines that run scheduled tasks.

    The lines call `claw run --due` every minute, by absolute paths; each scheduled task
    runs once per slot, and the runs' output goes to .claw/cron.log. With --systemd, a
    service and a timer that do the same.

    \b
    Examples:
      claw cron print                           then paste it into `crontab -e`
      claw cron print --systemd --name notes
    """
    from claw_batch.triggers import crontab

    project = load(directory, file)
    if not systemd:
        click.echo(crontab.crontab(project), nl=False)
        return 0
    for filename, text in crontab.systemd_units(project, name).items():
        click.echo(f"# --- ~/.config/systemd/user/{filename}")
        click.echo(text)
    return 0

from __future__ import annotations

from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options


@click.group()
def cron() -> None:
    """Run scheduled tasks from cron or systemd."""


@cron.command("print")
@click.option("--systemd", is_flag=True, help="Print a systemd service and timer instead.")
@click.option("--name", default="claw", show_default=True, help="The systemd units' name.")
@project_options
@handle_errors
def print_(
    systemd: bool, name: str, directory: Path | None, file: Path | None, verbose: bool, quiet: bool
) -> int:
    """Print crontab lines (or systemd units) that call `claw run --due` every minute.

    Add them with `crontab -e`; the runs' output goes to .claw/cron.log.
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

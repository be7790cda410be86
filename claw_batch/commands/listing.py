from __future__ import annotations

from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options


@click.command("list")
@project_options
@handle_errors
def list_tasks(directory: Path | None, file: Path | None, verbose: bool, quiet: bool) -> int:
    """List the tasks with their description, triggers and last result."""
    from claw_batch.state import last_statuses

    project = load(directory, file)
    last = last_statuses(project.root / ".claw" / "state.db")
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
        shown = ", ".join(triggers)
        rows.append((name, last.get(name, "never ran"), shown, task.description))
    width = max((len(r[0]) for r in rows), default=0)
    for name, status, shown, description in rows:
        click.echo(f"{name:<{width}}  {status:<10}  {description}")
        if shown and not quiet:
            click.echo(f"{'':<{width}}  {'':<10}  ({shown})")
    return 0

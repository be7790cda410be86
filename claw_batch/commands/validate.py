from __future__ import annotations

from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options


@click.command()
@project_options
@handle_errors
def validate(directory: Path | None, file: Path | None, verbose: bool, quiet: bool) -> int:
    """Check the clawfile, its prompt templates and the skills; exit 2 on error."""
    from claw_batch import skills

    project = load(directory, file)
    found = skills.discover(skills.skill_dirs(project.root, project.config.workspace))
    if not quiet:
        n = len(project.config.tasks)
        click.echo(
            f"{project.clawfile.name}: ok ({n} task{'s' if n != 1 else ''}, "
            f"{len(found)} skill{'s' if len(found) != 1 else ''})",
            err=True,
        )
    return 0

from __future__ import annotations

from pathlib import Path

import click

from claw_batch.commands.common import handle_errors


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@handle_errors
def init(directory: Path) -> int:
    """Scaffold a project.

    Writes clawfile.yaml, prompts/, skills/ and workspace/ in DIRECTORY (default: here),
    and adds .claw/ to .gitignore. A file already there is never overwritten.

    \b
    Examples:
      claw init
      claw init notes && cd notes && claw plan
    """
    from claw_batch.clawfile.scaffold import scaffold

    created, kept = scaffold(directory)
    for rel in created:
        click.echo(f"created {directory / rel}", err=True)
    for rel in kept:
        click.echo(f"kept    {directory / rel} (exists, or a step is a symlink)", err=True)
    click.echo(
        "next: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local model), then `claw run`", err=True
    )
    return 0

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
    and adds what claw writes of its own (.claw/ and the daily notes) to .gitignore. A file
    already there is never overwritten.

    \b
    Examples:
      claw init
      claw init notes && cd notes && claw plan
    """
    from claw_batch.clawfile.scaffold import scaffold

    created, kept, ignored = scaffold(directory)
    for rel in created:
        what = " (.claw/ and the daily notes)" if rel == ".gitignore" else ""
        click.echo(f"created {directory / rel}{what}", err=True)
    for rel in kept:
        click.echo(f"kept    {directory / rel} (exists, or a step is a symlink)", err=True)
    if ignored and ".gitignore" not in created:
        click.echo(f"added to {directory / '.gitignore'}: {', '.join(ignored)}", err=True)
    click.echo(
        "next: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local model), then `claw run`", err=True
    )
    return 0

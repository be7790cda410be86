from __future__ import annotations

import os
from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options


@click.command()
@click.option(
    "--since",
    "since_text",
    metavar="SPAN",
    default="7d",
    show_default=True,
    help="The period: 12h, 7d, 2w, or a date.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the page [default: .claw/report.html in the project].",
)
@project_options
@handle_errors
def report(
    since_text: str,
    output: Path | None,
    directory: Path | None,
    file: Path | None,
) -> int:
    """Write an HTML page of recent runs.

    One self-contained page about the period's runs, from .claw/state.db: totals, failures
    with their transcripts, a timeline of jobs, tokens and cost per task per day. Prints
    the page's path.

    \b
    Examples:
      claw report
      claw report --since 1d -o ~/public_html/claw.html
    """
    import sqlite3

    from claw_batch.clock import now_for_run
    from claw_batch.errors import ClawError
    from claw_batch.report import data, html
    from claw_batch.safety.atomic import write_atomic
    from claw_batch.store import history

    project = load(directory, file)
    now = now_for_run(os.environ)
    try:
        period = data.gather(project.root, history.since(since_text, now), now)
    except sqlite3.DatabaseError as e:  # corrupt: the next `claw run` moves it aside
        raise ClawError(f"ledger .claw/state.db: {e}") from None
    path = (output or project.root / ".claw" / "report.html").absolute()
    if output is not None:  # the user's folder: never made for them (a typo would be)
        _check_folder(output, path.parent)
    try:
        write_atomic(path, html.render(period, root=project.root, out=path))
    except OSError as e:
        raise ClawError(f"cannot write {path}: {e.strerror or e}") from None
    click.echo(path)
    return 0


def _check_folder(output: Path, folder: Path) -> None:
    """The folder `-o` writes into exists: a usage error names the part that does not."""
    from claw_batch.errors import UsageError

    if folder.is_dir():
        return
    there = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if there is not None and not there.is_dir():  # the nearest part there is a file
        raise UsageError(f"-o {output}: {there} is a file, not a folder")
    raise UsageError(f"-o {output}: there is no folder {folder}; create it first")

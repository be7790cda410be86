from __future__ import annotations

import json
import os
from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options


@click.command()
@click.argument("task", required=False)
@click.option("--since", "since_text", metavar="SPAN", help="Only runs since: 12h, 7d, 2w, a date.")
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    metavar="N",
    help="Show the last N runs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@project_options
@handle_errors
def log(
    task: str | None,
    since_text: str | None,
    limit: int,
    as_json: bool,
    directory: Path | None,
    file: Path | None,
) -> int:
    """List recent runs and their jobs.

    Oldest first, from .claw/state.db: each run, then each job that ran in it with its
    status, time, tokens, cost, and its output or the reason it failed. With TASK, only
    the runs that ran it, and its jobs.

    \b
    Examples:
      claw log
      claw log triage --since 2d
      claw log --json -n 100
    """
    import sqlite3

    from claw_batch.clock import now_for_run
    from claw_batch.errors import ClawError, UsageError
    from claw_batch.report.log import render
    from claw_batch.store import history

    project = load(directory, file)
    if task is not None and task not in project.config.tasks:
        raise UsageError(f"unknown task '{task}' (tasks: {', '.join(project.config.tasks)})")
    after = history.since(since_text, now_for_run(os.environ)) if since_text else None
    try:
        rows = history.runs(
            project.root / ".claw" / "state.db", task=task, after=after, limit=limit
        )
    except sqlite3.DatabaseError as e:  # corrupt: the next `claw run` moves it aside
        raise ClawError(f"ledger .claw/state.db: {e}") from None
    if as_json:
        click.echo(json.dumps([r.as_json() for r in rows], indent=2))
    elif rows:
        click.echo(render(rows), nl=False)
    else:
        click.echo("claw: no runs yet" + (" of that task" if task else ""), err=True)
    return 0

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options
from claw_batch.safety.onscreen import in_json, visible


@click.group()
def memory() -> None:
    """Search the workspace's memory.

    MEMORY.md, the daily notes and the memory archive, as the tasks' memory tools see them.
    """


@memory.command()
@click.argument("query", nargs=-1, required=True)
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    metavar="N",
    help="Show the best N matches.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@project_options
@handle_errors
def search(
    query: tuple[str, ...],
    limit: int,
    as_json: bool,
    directory: Path | None,
    file: Path | None,
) -> int:
    """Search memory for words, as the memory_search tool does.

    Facts whose key is the query come first, then headings and #tags, then lines of text
    with context; newer daily notes rank higher. Each match as `path:line [kind] text`.
    Exits 1 when nothing matches.

    \b
    Examples:
      claw memory search acme invoice
      claw memory search '#vendor' -n 20 --json
    """
    from claw_batch.clock import now_for_run
    from claw_batch.errors import UsageError
    from claw_batch.memory import search as memory_search

    text = " ".join(query)
    if not memory_search.words(text):
        raise UsageError("query is empty; give one or more words to look for")
    project = load(directory, file)
    workspace = project.config.workspace
    if not (project.root / workspace).is_dir():
        raise UsageError(f"no workspace: {project.root / workspace} is not a directory")
    today = now_for_run(os.environ).date()
    found = memory_search.search(project.root, workspace, text, limit=limit, today=today)
    if as_json:
        click.echo(in_json(json.dumps(found.as_json(), indent=2, ensure_ascii=False)))
    elif found.hits:
        click.echo(visible(memory_search.render(found)))  # notes quote outside text
    else:
        click.echo(visible(f"claw: no memory matches {found.query!r}"), err=True)
    return 0 if found.hits else 1

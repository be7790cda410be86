from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from claw_batch.commands.common import handle_errors, load, project_options, quiet_option
from claw_batch.figures import count

if TYPE_CHECKING:
    from claw_batch.skills.report import Entry


@click.group()
def skills() -> None:
    """List or check the skills.

    The skills tasks can be offered: workspace/skills, skills/, ~/.config/claw/skills and
    claw's built-in ones, in that order of precedence.
    """


@skills.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@project_options
@quiet_option("Leave out descriptions and paths.")
@handle_errors
def list_skills(as_json: bool, directory: Path | None, file: Path | None, quiet: bool) -> int:
    """List the skills found and whether each is offered.

    Each skill's name, where it comes from, and `ok` or why it is not offered.
    """
    listed = _entries(directory, file)
    if as_json:
        rows = [
            {
                "name": e.skill.name,
                "source": e.skill.source,
                "path": e.shown,
                "state": e.state,
                "detail": e.detail,
                "description": e.skill.description,
            }
            for e in listed
        ]
        click.echo(json.dumps(rows, indent=2))
        return 0
    if not listed:
        click.echo("claw: no skills found", err=True)
        return 0
    width = max(len(e.skill.name) for e in listed)
    for e in listed:
        state = f"{e.state}: {e.detail}" if e.detail else e.state
        click.echo(f"{e.skill.name:<{width}}  {e.skill.source:<9}  {state}")
        if e.skill.description and not quiet:
            click.echo(f"{'':<{width}}  {'':<9}  {e.skill.description}  ({e.shown})")
    return 0


@skills.command()
@project_options
@quiet_option("Only errors.")
@handle_errors
def check(directory: Path | None, file: Path | None, quiet: bool) -> int:
    """Check every skill found.

    Exits 2 when one is invalid; warns about skills that are not available here, are
    shadowed, or use front matter keys claw does not know.
    """
    from claw_batch.errors import ClawfileError
    from claw_batch.skills.report import findings

    listed = _entries(directory, file)
    found = findings(listed)
    for f in found:
        if f.level == "warning" and not quiet:
            click.echo(f"{f.shown}: warning: {f.text}", err=True)
    errors = [f"{f.shown}: {f.text}" for f in found if f.level == "error"]
    if errors:
        raise ClawfileError("\n".join(errors))
    if not quiet:
        ok = sum(e.state == "ok" for e in listed)
        click.echo(
            f"claw: {count(len(listed), 'skill')} found, {ok} offered, none invalid", err=True
        )
    return 0


def _entries(directory: Path | None, file: Path | None) -> list[Entry]:
    from claw_batch.skills import skill as skill_lib
    from claw_batch.skills.report import entries

    project = load(directory, file)
    dirs = skill_lib.skill_dirs(project.root, project.config.workspace)
    return entries(skill_lib.scan(dirs), project.root, os.environ)

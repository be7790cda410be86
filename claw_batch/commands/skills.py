from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from claw_batch.commands.common import handle_errors, load, project_options, quiet_option
from claw_batch.figures import count

if TYPE_CHECKING:
    from claw_batch.config import Project
    from claw_batch.skills.offer import Offer
    from claw_batch.skills.report import Entry
    from claw_batch.skills.skill import Skill


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

    \b
    Examples:
      claw skills list
      claw skills list --json
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
@quiet_option("Only errors: no warnings, no table of what skills cost.")
@handle_errors
def check(directory: Path | None, file: Path | None, quiet: bool) -> int:
    """Check every skill found, and what each task's skills cost.

    Exits 2 when one is invalid; warns about skills that are not available here, are
    shadowed, or use front matter keys claw does not know. Then says which skills each
    task is offered and what their list adds to its prompt.

    \b
    Examples:
      claw skills check
      claw skills check -q
    """
    from claw_batch.errors import ClawfileError
    from claw_batch.skills.report import entries, findings

    project, scanned = _scan(directory, file)
    listed = entries(scanned, project.root, os.environ)
    found = findings(listed)
    for f in found:
        if f.level == "warning" and not quiet:
            click.echo(f"claw: {f.shown}: warning: {f.text}", err=True)
    errors = [f"{f.shown}: {f.text}" for f in found if f.level == "error"]
    if errors:
        raise ClawfileError("\n".join(errors))
    if not quiet:
        ok = sum(e.state == "ok" for e in listed)
        click.echo(
            f"claw: {count(len(listed), 'skill')} found, {ok} available, none invalid", err=True
        )
        _print_offers(project, scanned)
    return 0


def _print_offers(project: Project, scanned: list[Skill]) -> None:
    """Per task: what its skills list costs, and which skills are on it."""
    from claw_batch.skills.offer import offers
    from claw_batch.skills.skill import available, pick

    found = offers(project.config.tasks, available(pick(scanned), os.environ), project.root)
    if not found:
        return
    click.echo("The skills list each task's system prompt carries, sent with every model call")
    click.echo("(tokens estimated at 4 characters a token):")
    width = max(len(o.task) for o in found)
    sizes = [f"~{o.tokens:,} tokens" if o.tokens else "0 tokens" for o in found]
    size_width = max(map(len, sizes))
    for o, size in zip(found, sizes, strict=True):
        click.echo(f"  {o.task:<{width}}  {size:>{size_width}}  {_offered(o)}")
    if any(o.named is None and o.skills for o in found):
        click.echo(
            "Give a task fewer with skills: [name, ...] under it in clawfile.yaml, "
            "none with skills: []."
        )
    # A bare `claw plan` shows only the default tasks, not a hook's or a schedule's.
    click.echo("A change to a task's skills reruns its jobs: claw plan '*' lists every task's.")


def _offered(o: Offer) -> str:
    names = ", ".join(s.name for s in o.skills) or "none"
    if o.named is None:
        return f"{names} (all it can use; it has no skills: key)"
    return f"{names} (skills: [{', '.join(o.named)}])"


def _scan(directory: Path | None, file: Path | None) -> tuple[Project, list[Skill]]:
    from claw_batch.skills import skill as skill_lib

    project = load(directory, file)
    return project, skill_lib.scan(skill_lib.skill_dirs(project.root, project.config.workspace))


def _entries(directory: Path | None, file: Path | None) -> list[Entry]:
    from claw_batch.skills.report import entries

    project, scanned = _scan(directory, file)
    return entries(scanned, project.root, os.environ)

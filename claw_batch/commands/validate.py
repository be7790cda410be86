from __future__ import annotations

import os
from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, project_options, quiet_option
from claw_batch.errors import ClawfileError, said
from claw_batch.figures import count


@click.command()
@project_options
@quiet_option("Only warnings and errors.")
@handle_errors
def validate(directory: Path | None, file: Path | None, quiet: bool) -> int:
    """Check the clawfile, its templates and skills.

    Exits 2 on an error, with every problem on a line of its own (file:line: key: what is
    wrong); warns about API keys this environment does not set. Then says which tasks
    outside content can reach, and from where.

    \b
    Examples:
      claw validate
      claw validate -q -f nightly.yaml
    """
    from claw_batch.clawfile.validate import validate as validated
    from claw_batch.config import Project, clawfile_path
    from claw_batch.llm.endpoints import missing_keys
    from claw_batch.plan import graph, taintflow
    from claw_batch.safety.paths import shown_path
    from claw_batch.skills import skill as skills

    path = clawfile_path(directory, file)
    checked = validated(path, path.parent)
    project = Project(path.parent, path, checked.config)
    dirs = skills.skill_dirs(project.root, project.config.workspace)
    scanned = skills.scan(dirs)
    bad = [
        f"{shown_path(s.path, project.root)}: not a valid skill: {problem}"
        for s in scanned
        for problem in s.problems
    ]
    if bad:
        raise ClawfileError("\n".join(bad))
    found = skills.discover(dirs)
    for warning in checked.warnings:
        click.echo(said(warning), err=True)
    for missing in missing_keys(project.config, os.environ, project.config.tasks):
        # The environment, not the clawfile: a warning, as cron or CI may set it later.
        where = f"{project.clawfile.name}: providers.{missing.provider}.api_key_env"
        click.echo(said(f"{where}: warning: {missing}"), err=True)
    if not quiet:
        n = len(project.config.tasks)
        click.echo(
            f"{project.clawfile.name}: ok ({count(n, 'task')}, {count(len(found), 'skill')})",
            err=True,
        )
        for line in taintflow.report(project.config, graph.build(project.config)):
            click.echo(line, err=True)
    return 0

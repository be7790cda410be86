from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from claw_batch.commands.common import (
    handle_errors,
    project_options,
    quiet_option,
    stop_on_sigterm,
)
from claw_batch.errors import ClawfileError, said
from claw_batch.figures import count

if TYPE_CHECKING:
    from claw_batch.config import Clawfile


@click.command()
@project_options
@quiet_option("Only warnings and errors.")
@click.option(
    "--mcp",
    "check_mcp",
    is_flag=True,
    help="Also start each MCP server and check the tools the tasks name (claw mcp list).",
)
@handle_errors
def validate(directory: Path | None, file: Path | None, quiet: bool, check_mcp: bool) -> int:
    """Check the clawfile, its templates and skills.

    Exits 2 on an error, with every problem on a line of its own (file:line: key: what is
    wrong); warns about API keys this environment does not set. Then says which tasks
    outside content can reach, and from where.

    \b
    With --mcp, then starts each MCP server as `claw mcp list` does, and exits 2 when one
    does not start or a task names a tool its server does not have.

    \b
    Examples:
      claw validate
      claw validate -q -f nightly.yaml
      claw validate --mcp
    """
    from claw_batch.clawfile import notifychecks
    from claw_batch.clawfile.validate import validate as validated
    from claw_batch.clawfile.yamlsource import load_yaml
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
    for warning in notifychecks.unset_variables(load_yaml(path, path.name), os.environ):
        click.echo(said(str(warning)), err=True)  # as an unset key: cron's may set it
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
    if check_mcp:
        _check_mcp(project.root, project.config, quiet)
    return 0


def _check_mcp(root: Path, config: Clawfile, quiet: bool) -> None:
    """Start the servers; a server that does not start, or a tool a task names that its
    server does not have, is a clawfile error (exit 2): the run would fail on it."""
    from claw_batch.commands.mcp import problems
    from claw_batch.mcp.survey import survey

    if not config.mcp_servers:
        return
    stop_on_sigterm()  # the servers are stopped on the way out
    found = survey(root, config, os.environ)
    for note in found.notes:
        click.echo(said(f"warning: {note}"), err=True)
    bad = list(problems(found))
    if bad:
        raise ClawfileError("\n".join(bad))
    if not quiet:
        tools = sum(len(s.tools) for s in found.servers)
        servers = count(len(found.servers), "MCP server")
        click.echo(f"{servers}: ok ({count(tools, 'tool')})", err=True)

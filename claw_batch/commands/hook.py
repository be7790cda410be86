from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from claw_batch.commands.common import (
    handle_errors,
    load,
    output_options,
    project_options,
    quiet_option,
    typed,
)
from claw_batch.errors import said
from claw_batch.safety.onscreen import visible

if TYPE_CHECKING:
    from claw_batch.run.results import RunSummary

HOOK_NAMES = ("pre-commit", "commit-msg", "pre-push")  # = triggers.hooks.HOOKS, unimported
STOPPED = frozenset({"failed", "limit", "interrupted"})


@click.group()
def hook() -> None:
    """Run tasks from git hooks.

    `claw hook install` writes a git hook that calls `claw hook run`, which runs the tasks
    whose `hook:` names that hook; a task that fails stops the commit (or the push),
    unless its `on_error:` is warn.
    """


@hook.command()
@click.argument("name", type=click.Choice(HOOK_NAMES), default="pre-commit", metavar="[NAME]")
@project_options
@quiet_option("Say nothing when it worked.")
@handle_errors
def install(name: str, directory: Path | None, file: Path | None, quiet: bool) -> int:
    """Install a git hook that runs the tasks for it.

    The hook NAME runs `claw hook run NAME`. A hook already there is kept as
    NAME.pre-claw and runs first.

    \b
    NAME is one of: pre-commit (the default), commit-msg, pre-push.

    \b
    Examples:
      claw hook install
      claw hook install pre-push
    """
    from claw_batch.triggers import hooks

    message = hooks.install(load(directory, file), name, sys.executable)
    if not quiet:
        click.echo(f"claw: {message}", err=True)
    return 0


@hook.command()
@click.argument("name", type=click.Choice(HOOK_NAMES), default="pre-commit", metavar="[NAME]")
@project_options
@quiet_option("Say nothing when it worked.")
@handle_errors
def uninstall(name: str, directory: Path | None, file: Path | None, quiet: bool) -> int:
    """Remove claw's git hook.

    Removes claw's hook NAME and puts back the hook it had kept, if any.

    \b
    NAME is one of: pre-commit (the default), commit-msg, pre-push.

    \b
    Examples:
      claw hook uninstall
      claw hook uninstall pre-push
    """
    from claw_batch.triggers import hooks

    message = hooks.uninstall(load(directory, file), name)
    if not quiet:
        click.echo(f"claw: {message}", err=True)
    return 0


# claw's options come before NAME; every argument after it is the hook's. The pre-commit
# framework appends staged file names with no `--` before them, and a file named
# `-fevil.yaml` must stay a file name, not choose the clawfile (attack review 4, H1).
@hook.command(
    "run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.argument("name", type=click.Choice(HOOK_NAMES), metavar="NAME")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--wait", is_flag=True, help="If a claw run holds the project, wait instead of exit 75."
)
@click.option(
    "-B", "--force", is_flag=True, help="Ask the model again, even for a remembered verdict."
)
@project_options
@output_options
@handle_errors
def run_hook(
    name: str,
    args: tuple[str, ...],
    wait: bool,
    force: bool,
    directory: Path | None,
    file: Path | None,
    verbose: bool,
    quiet: bool,
) -> int:
    """Run the tasks for a git hook (what the hook calls).

    Runs the tasks whose `hook:` is NAME, as git does: ARGS are the hook's arguments (for
    pre-commit, the staged files become `files`). claw's options come before NAME; every
    argument after it is the hook's, even one that starts with a dash. Exit 1 blocks the
    commit.

    \b
    NAME is one of: pre-commit, commit-msg, pre-push.

    \b
    Examples:
      claw hook run pre-commit
      claw hook run -B pre-commit
      claw hook run commit-msg .git/COMMIT_EDITMSG
    """
    from claw_batch.triggers import hooks

    cwd = Path.cwd()
    os.environ.update(hooks.absolute_git_paths(os.environ, cwd))
    project = load(directory, file, cache="write")
    names = hooks.tasks_for(project.config, name)
    if not names:
        return 0

    from claw_batch.run.runner import Runner, RunOptions
    from claw_batch.terminal.progress import Progress

    options = RunOptions(
        targets=tuple(names),
        files=hooks.files_for(name, _hooks_own(args), cwd, project.root),
        wait=wait,
        force=force,
        argv=typed(),
        hook=name,
    )
    progress = Progress(quiet=quiet, verbose=verbose)
    signal.signal(signal.SIGTERM, _interrupt)
    runner = Runner(project, options, progress=progress)
    with progress:  # Ctrl-C, SIGTERM or a bug: the live area goes, the cursor comes back
        if progress.live:
            progress.expect_jobs(runner.plan)
        summary = runner.run()
        progress.finish()
    if summary.exit_code:
        click.echo(visible(said(_stopped(name, names, summary))), err=True)
    elif summary.error:
        click.echo(visible(said(summary.error)), err=True)
    return summary.exit_code


def _stopped(hook: str, names: list[str], summary: RunSummary) -> str:
    """Why git stops, said for someone at `git commit` (the runner leaves `--wait` and
    `--replay` out of a hook run's errors: git passes no options), and the tasks named,
    whether they failed or never ran."""
    from claw_batch.errors import Locked

    lines = [summary.error] if summary.error else []
    failed = [r.job.name for r in summary.results if r.status in STOPPED]
    if failed:
        lines.append(f"the {hook} hook failed ({', '.join(failed)}); git stops here")
        return "\n".join(lines)
    why = ": another claw run holds the project" if summary.exit_code == Locked.exit_code else ""
    lines.append(f"the {hook} hook did not run {', '.join(names)}{why}; git stops here")
    if why:
        verb = "push" if hook == "pre-push" else "commit"
        lines.append(
            f"{verb} again when that run ends, or skip the hook once: git {verb} --no-verify"
        )
    return "\n".join(lines)


def _hooks_own(args: tuple[str, ...]) -> tuple[str, ...]:
    """The hook's arguments without the `--` the installed script puts before them."""
    return args[1:] if args[:1] == ("--",) else args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt

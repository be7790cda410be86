"""The `claw` command: a click group over thin commands in claw_batch.commands."""

from __future__ import annotations

import gc

import click

from claw_batch import __version__

# name -> "module:attribute"; a command's module is imported only when it is the one run
COMMANDS = {
    "run": "claw_batch.commands.run:run",
    "plan": "claw_batch.commands.plan:plan",
    "why": "claw_batch.commands.plan:why",
    "list": "claw_batch.commands.listing:list_tasks",
    "validate": "claw_batch.commands.validate:validate",
    "show": "claw_batch.commands.show:show",
    "init": "claw_batch.commands.init:init",
    "graph": "claw_batch.commands.graph:graph",
    "hook": "claw_batch.commands.hook:hook",
    "cron": "claw_batch.commands.cron:cron",
    "schedule": "claw_batch.commands.schedule:schedule",
    "log": "claw_batch.commands.log:log",
    "report": "claw_batch.commands.report:report",
    "watch": "claw_batch.commands.watch:watch",
    "memory": "claw_batch.commands.memory:memory",
    "skills": "claw_batch.commands.skills:skills",
}


class _Commands(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        import importlib

        module, _, name = COMMANDS[cmd_name].partition(":")
        command: click.Command = getattr(importlib.import_module(module), name)
        return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="claw")
def main() -> None:
    """make for LLM agent tasks.

    Tasks live in clawfile.yaml. `claw run` runs them headlessly through a tool loop
    against any OpenAI-compatible endpoint, writes their results and a daily note, and
    keeps a transcript of every job under .claw/runs/.

    Exit codes: 0 ok, 1 a job failed, 2 usage or clawfile error, 3 a limit was hit
    (max_steps, timeout, budget, a loop of identical calls), 75 another run holds the
    project, 130 interrupted.
    """


def entry() -> None:
    """The `claw` program (and `python -m claw_batch`): the group, then an exit that leaves
    the heap out of the interpreter's last garbage collection. That collection walks every
    object openai, pydantic and claw made (0.18 s of CPU, seconds on busy cores: the slow
    stop of `claw watch` in issue 16); the process ends right after, so it frees nothing."""
    try:
        main()
    finally:
        gc.freeze()

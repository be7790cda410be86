"""The `claw` command: a click group over thin commands in claw_batch.commands."""

from __future__ import annotations

import gc
import sys
from typing import Any, NoReturn

import click

from claw_batch import __version__
from claw_batch.errors import said

# The commands as `claw --help` lists them: name -> ("module:attribute", what it does). A
# command's module is imported only when it is the one run, so the list is written here; a
# test checks each line against the first line of the command's own help.
SECTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "Run tasks": {
        "run": ("claw_batch.commands.run:run", "Run the tasks that are not up to date"),
        "plan": ("claw_batch.commands.plan:plan", "Say what `claw run` would run, and why"),
        "why": ("claw_batch.commands.plan:why", "Say why each job of a task would (not) run"),
    },
    "Triggers": {
        "watch": ("claw_batch.commands.watch:watch", "Run watch tasks as files arrive"),
        "schedule": (
            "claw_batch.commands.schedule:schedule",
            "Run scheduled tasks on time, in the foreground",
        ),
        "cron": ("claw_batch.commands.cron:cron", "Print crontab lines for scheduled tasks"),
        "hook": ("claw_batch.commands.hook:hook", "Run tasks from git hooks"),
    },
    "See what happened": {
        "log": ("claw_batch.commands.log:log", "List recent runs and their jobs"),
        "show": ("claw_batch.commands.show:show", "Show a run's transcripts"),
        "report": ("claw_batch.commands.report:report", "Write an HTML page of recent runs"),
        "memory": ("claw_batch.commands.memory:memory", "Search the workspace's memory"),
        "cache": ("claw_batch.commands.cache:cache", "See or trim the call cache"),
    },
    "Set up a project": {
        "init": ("claw_batch.commands.init:init", "Scaffold a project"),
        "list": ("claw_batch.commands.listing:list_tasks", "List the tasks and their state"),
        "validate": (
            "claw_batch.commands.validate:validate",
            "Check the clawfile, its templates and skills",
        ),
        "graph": ("claw_batch.commands.graph:graph", "Print the task graph"),
        "skills": ("claw_batch.commands.skills:skills", "List or check the skills"),
        "mcp": ("claw_batch.commands.mcp:mcp", "List MCP servers' tools, or say why not"),
        "notify": (
            "claw_batch.commands.notify:notify",
            "Send a task's notices now, to test them",
        ),
    },
}
COMMANDS = {name: row[0] for section in SECTIONS.values() for name, row in section.items()}


class _Commands(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # The arguments as given, for the ledger: `claw run -j 4`, never the interpreter,
        # `-m claw_batch` or a venv's path (claw_batch.commands.common.typed).
        ctx.meta["claw.args"] = tuple(args)
        return super().parse_args(ctx, args)

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as e:
            _usage_error(e, self)

    def invoke(self, ctx: click.Context) -> Any:
        try:  # a subcommand's, or a group's subcommand's, parse errors come from here
            return super().invoke(ctx)
        except click.UsageError as e:
            _usage_error(e, self, ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        import importlib

        module, _, name = COMMANDS[cmd_name].partition(":")
        command: click.Command = getattr(importlib.import_module(module), name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by what they are for, from the table: no command module is imported."""
        width = max(map(len, COMMANDS))  # one column for all the sections, as git has
        for title, rows in SECTIONS.items():
            with formatter.section(title):
                formatter.write_dl([(n.ljust(width), summary) for n, (_, summary) in rows.items()])


def _usage_error(
    e: click.UsageError, root: click.Group, ctx: click.Context | None = None
) -> NoReturn:
    """A command line click cannot parse, said as claw says its errors (and as git does):
    one line that starts `claw: ` and names where to read more, exit 2. No usage block."""
    if isinstance(e, click.exceptions.NoArgsIsHelpError):
        raise e  # `claw hook` alone: click shows the group's help, as before
    if e.ctx is not None:
        words = e.ctx.command_path.split()[1:]  # claw, whatever the program's name
        command, group = " ".join(["claw", *words]), isinstance(e.ctx.command, click.Group)
    else:  # the parser's own errors (`--model` without a value) come without a context
        command, group = _typed_command(root, ctx), False
    unknown = e.message.startswith("No such command ")
    if unknown and group:
        name = e.message.removeprefix("No such command ").rstrip(".")
        message = f"{name} is not a {command} command. See '{command} --help'."
    else:
        message = f"{_what(e)}. See '{command} -h'."
        if command != "claw":
            message = f"{command.partition(' ')[2]}: {message}"
    click.echo(said(message), err=True)
    sys.exit(e.exit_code)


def _typed_command(root: click.Group, ctx: click.Context | None) -> str:
    """`claw hook run`: the command words of the arguments as typed."""
    if ctx is None:
        return "claw"
    words, command = ["claw"], root
    for arg in ctx.meta.get("claw.args", ()):
        found = command.get_command(ctx, arg)
        if found is None and arg.startswith("-"):
            continue
        if found is None:
            break
        words.append(arg)
        if not isinstance(found, click.Group):
            break
        command = found
    return " ".join(words)


def _what(e: click.UsageError) -> str:
    """click's message, lower-cased like claw's, the parameter named as typed (`-j`)."""
    text = e.format_message()  # "Missing argument 'QUERY...'.": click's whole sentence
    if type(e) is click.BadParameter and e.param is not None:
        param = e.param
        name = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
        text = f"{name}: {e.message}"
    text = text.rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 88},
    epilog="`claw COMMAND -h` shows a command's options and examples.",
)
@click.version_option(__version__, prog_name="claw")
def main() -> None:
    """make for LLM agent tasks.

    Tasks live in clawfile.yaml. `claw run` runs them headlessly through a tool loop
    against any OpenAI-compatible endpoint, writes their results and a daily note, and
    keeps a transcript of every job under .claw/runs/. Like make, it runs a job only when
    something it depends on changed.

    Exit codes: 0 ok, 1 a job failed, 2 usage or clawfile error, 3 a limit was hit
    (max_steps, timeout, budget, a loop of identical calls), 75 another run holds the
    project, 130 interrupted.
    """


# The collector's first generation is collected every this many objects made (Python's
# default: 700). A run keeps a few objects per job to its end (a job, its result): at 700,
# a 100,000-job no-op walked everything it held several times over as it grew (~0.08 s of
# CPU), to find no cycle. mypy raises it for the same reason.
YOUNG_OBJECTS = 100_000


def entry() -> None:
    """The `claw` program (and `python -m claw_batch`): the group, with fewer collections
    (YOUNG_OBJECTS), then an exit that leaves the heap out of the interpreter's last garbage
    collection. That collection walks every object openai, pydantic and claw made (0.18 s of
    CPU, seconds on busy cores: the slow stop of `claw watch` in issue 16), to free memory the
    process is about to give back."""
    gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])
    try:
        main()
    finally:
        gc.freeze()

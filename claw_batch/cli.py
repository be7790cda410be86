"""The `claw` command: a click group over thin commands in claw_batch.commands."""

from __future__ import annotations

import click

from claw_batch import __version__
from claw_batch.commands import COMMANDS


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


for command in COMMANDS:
    main.add_command(command)

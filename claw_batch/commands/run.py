from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from claw_batch.commands.common import (
    handle_errors,
    jobs_option,
    load,
    output_options,
    project_options,
    stop_on_sigterm,
    typed,
)
from claw_batch.errors import UsageError, said
from claw_batch.safety.onscreen import visible

if TYPE_CHECKING:
    from claw_batch.config import Project
    from claw_batch.run.results import RunSummary
    from claw_batch.run.runner import RunOptions, Selection
    from claw_batch.terminal.progress import Progress


@click.command()
@click.argument("targets", nargs=-1, metavar="[TASK|GLOB]...")
@jobs_option
@click.option("-k", "--keep-going", is_flag=True, help="Go on with other jobs after a failure.")
@click.option("-B", "--force", is_flag=True, help="Run every selected job, up to date or not.")
@click.option(
    "-n", "--dry-run", is_flag=True, help="Say what would run and why; no model calls, no writes."
)
@click.option(
    "--wait", is_flag=True, help="If another claw run holds the project, wait instead of exit 75."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option(
    "--files",
    multiple=True,
    metavar="F",
    help="Paths for the `files` template variable (repeatable).",
)
@click.option("--record", is_flag=True, help="Call the endpoint and record its replies.")
@click.option("--replay", is_flag=True, help="Answer from recorded replies; no network.")
@click.option(
    "--cassettes",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where recorded replies live (default: cassettes/ in the project).",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="Neither replay model replies from the call cache nor store them.",
)
@click.option("--model", help="Use this model for every task.")
@click.option(
    "--batch",
    is_flag=True,
    help="Send every task's model calls through the provider's Batch API (half price, slow).",
)
@click.option(
    "--batch-wait",
    metavar="DURATION",
    help="Wait at most this long (30m, 2h) for batches; then exit 3, `claw run` resumes.",
)
@click.option(
    "--due",
    is_flag=True,
    help="Run the scheduled tasks whose latest slot has not run yet (what cron calls).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    help="Where jobs' tool loops run: here, or on a Ray cluster (default: the clawfile's "
    "executor:, else local).",
)
@click.option(
    "--address",
    metavar="ADDR",
    help="The Ray cluster for --executor ray: auto (the one this machine is a node of) or "
    "its head's HOST:PORT.",
)
@click.option(
    "--no-notify", is_flag=True, help="Send no notice (notify:) and record none for this run."
)
@project_options
@output_options
@handle_errors
def run(
    targets: tuple[str, ...],
    jobs: int,
    keep_going: bool,
    force: bool,
    dry_run: bool,
    wait: bool,
    as_json: bool,
    files: tuple[str, ...],
    record: bool,
    replay: bool,
    cassettes: Path | None,
    no_cache: bool,
    model: str | None,
    batch: bool,
    batch_wait: str | None,
    due: bool,
    executor: str | None,
    address: str | None,
    no_notify: bool,
    directory: Path | None,
    file: Path | None,
    verbose: bool,
    quiet: bool,
) -> int:
    """Run the tasks that are not up to date.

    TASK|GLOB names the tasks to run (default: the clawfile's `default:`, or else every
    task without a trigger); the tasks they need run first. A job runs when it never ran
    or something it depends on changed: an input, the prompt, the model, an upstream
    result (`claw why TASK` says which). Its final answer goes to the task's `output`, an
    entry to today's daily note and its transcript to .claw/runs/<run-id>/.

    \b
    Examples:
      claw run                    the default tasks, what is not up to date
      claw run 'digest-*' -j 4    the tasks a glob matches, four jobs at a time
      claw run triage -B          every job of triage, up to date or not
      claw run -n                 what would run and why (= claw plan)
      claw run --replay           answer from the recorded replies, offline
      claw run --due              the scheduled tasks whose slot is due (for cron)
      claw run --batch            through the provider's Batch API, at its price
      claw run --executor ray     the jobs' tool loops on a Ray cluster
      claw run --no-notify        send none of the tasks' notices (notify:)
    """
    from claw_batch.llm.endpoints import Mode
    from claw_batch.run.executorcheck import from_command_line
    from claw_batch.run.runner import RunOptions
    from claw_batch.terminal.progress import Progress

    if record and replay:
        raise UsageError("--record and --replay exclude each other")
    waited = None if batch_wait is None else _duration(batch_wait)
    project = load(directory, file, cache="read" if dry_run else "write")
    chosen = from_command_line(project.config, executor, address)
    select: Selection | None = None
    if due:  # the schedule's modules, for the run that asks for them
        from claw_batch.triggers.due import DueSlots

        select = DueSlots()
    mode = Mode(
        replay=replay,
        record=record,
        cassettes=(cassettes or project.root / "cassettes").absolute(),
        batch=batch,
        batch_wait=waited,
        cache=not no_cache,
    )
    options = RunOptions(
        force=force,
        dry_run=dry_run,
        wait=wait,
        targets=targets,
        keep_going=keep_going,
        jobs=jobs,
        files=files,
        model=model,
        mode=mode,
        argv=typed(),
        select=select,
        trigger="cron" if due else "hand",
        executor=chosen,
        notify=not no_notify,
    )
    summary = _run(project, options, Progress(quiet=quiet, verbose=verbose), due=due)
    if not dry_run:  # a project's first run: .claw/ is there now for its validated clawfile
        from claw_batch.clawfile.cache import save_unsaved

        save_unsaved()
    if summary.error:
        click.echo(visible(said(summary.error)), err=True)
    if as_json:
        from claw_batch.run.envelope import envelope_chunks

        sys.stdout.flush()
        out = sys.stdout.buffer
        for chunk in envelope_chunks(summary):  # never the whole envelope of a large run
            out.write(chunk)
        out.write(b"\n")
        out.flush()
    return summary.exit_code


def _run(project: Project, options: RunOptions, progress: Progress, *, due: bool) -> RunSummary:
    """The run, on the terminal: its jobs announced when the screen is live, "nothing to run"
    said when nothing was (but by --due, silent when idle)."""
    from claw_batch.run.runner import Runner

    runner = Runner(project, options, progress=progress)
    stop_on_sigterm()
    with progress:  # Ctrl-C, SIGTERM or a bug: the live area goes, the cursor comes back
        if progress.live and not (due or options.dry_run):
            progress.expect_jobs(runner.plan)
        summary = runner.run()
        if not summary.results and not summary.error and not due:
            progress.message("claw: nothing to run")
        progress.finish()
    return summary


def _duration(text: str) -> float:
    """--batch-wait's seconds: a number with a unit, s, m, h or d (30m, 2h, 1.5h)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value, unit = text.strip()[:-1], text.strip()[-1:].lower()
    try:
        seconds = float(value) * units[unit]
    except (KeyError, ValueError):
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise UsageError(
            f"--batch-wait {text!r}: expected a duration such as 30m, 2h or 90s "
            "(a number and s, m, h or d)"
        )
    return seconds

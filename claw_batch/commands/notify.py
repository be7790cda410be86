"""`claw notify test TASK`: a sample notice sent now through each of the task's deliveries
(`notify:`), to see that they arrive before a night's run depends on them."""

from __future__ import annotations

import os
from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options, stop_on_sigterm
from claw_batch.errors import UsageError
from claw_batch.safety.onscreen import visible

_HOW = (
    "add one under the task, in defaults: or at the top level, e.g.\n"
    "  notify:\n"
    "    - on: [failed]\n"
    "      command: [notify-send, claw]"
)


@click.group()
def notify() -> None:
    """Send a task's notices now, to test them.

    The deliveries are those of `notify:` in the clawfile (README: Notify).
    """


@notify.command(name="test")
@click.argument("task")
@project_options
@handle_errors
def test(task: str, directory: Path | None, file: Path | None) -> int:
    """Send a sample notice through each of TASK's deliveries.

    Prints one line per delivery, `ok` or `failed` and why; exits 0 when every one was
    delivered, 1 when one failed. Nothing is recorded in the ledger.

    \b
    Examples:
      claw notify test nightly
    """
    from claw_batch.llm.endpoints import api_keys
    from claw_batch.notify.notice import Notice
    from claw_batch.run.notices import default_send, notify_secrets
    from claw_batch.safety.redact import Redactor, secrets_from_env

    project = load(directory, file)
    config = project.config
    if task not in config.tasks:
        raise UsageError(f"unknown task '{task}' (tasks: {', '.join(config.tasks)})")
    deliveries = config.tasks[task].notify
    if not deliveries:
        raise UsageError(f"task '{task}' has no notify: deliveries; {_HOW}")
    stop_on_sigterm()
    environ = dict(os.environ)
    secrets = [*api_keys(config, environ), *secrets_from_env(environ)]
    redact = Redactor([*secrets, *notify_secrets(config, environ)])
    sample = Notice(
        task=task,
        event="ok",
        status="ok",
        run_id="",
        project=project.root.name,
        jobs=1,
        counts={"ok": 1},
        excerpt="A sample notice from `claw notify test`: no job ran.\n",
        show=f"claw show {task}",
        sample=True,
    )
    send = default_send()
    failed = 0
    for delivery in deliveries:
        sent = send(delivery, sample, environ=environ, redact=redact, project=project.root)
        if sent.ok:
            click.echo(visible(f"ok  {delivery.target}"))
        else:
            failed += 1
            click.echo(visible(f"failed  {delivery.target}: {redact(sent.error or '?')}"))
    return 1 if failed else 0

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from claw_batch.errors import ClawError, said
from claw_batch.safety.onscreen import visible

if TYPE_CHECKING:
    from claw_batch.clawfile.cache import Use
    from claw_batch.config import Project

F = TypeVar("F", bound=Callable[..., Any])


def project_options(fn: F) -> F:
    """-C / -f, on every command that works on a project."""
    options = [
        click.option(
            "-C",
            "directory",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Run as if claw was started in DIR.",
        ),
        click.option(
            "-f",
            "--file",
            "file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Use this clawfile instead of looking for clawfile.yaml.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def output_options(fn: F) -> F:
    """-v / -q, on the commands that run jobs and report them as they go."""
    fn = quiet_option("Only failures and errors.")(fn)
    return click.option("-v", "--verbose", is_flag=True, help="Also show each tool call.")(fn)


def quiet_option(help: str) -> Callable[[F], F]:
    """-q, saying what this command leaves out."""
    return click.option("-q", "--quiet", is_flag=True, help=help)


def jobs_option(fn: F) -> F:
    return click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        metavar="N",
        help="Run up to N jobs at a time.",
    )(fn)


def load(directory: Path | None, file: Path | None, *, cache: Use = "read") -> Project:
    """The project; `cache` says whether an unchanged clawfile may skip validation."""
    from claw_batch.clawfile.load import load_project

    return load_project(directory, file, cache=cache)


def handle_errors(fn: Callable[..., int | None]) -> Callable[..., None]:
    """The one place that turns claw's errors into a message and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs)
        except ClawError as e:
            from claw_batch.safety.redact import redact_environment

            click.echo(visible(said(redact_environment(str(e)))), err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("claw: interrupted", err=True)
            sys.exit(130)
        except Exception as e:  # the top boundary: anything else is a bug; keep its traceback
            from claw_batch.safety.redact import redact_environment
            from claw_batch.terminal.crash import save_traceback

            where = save_traceback(e)
            message = redact_environment(f"{type(e).__name__}: {e}")
            click.echo(visible(f"claw: unexpected error: {message}"), err=True)
            click.echo(f"claw: traceback saved to {where}; please report it", err=True)
            sys.exit(1)
        sys.exit(code or 0)

    return wrapper


def stop_on_sigterm() -> None:
    """A service manager's stop (SIGTERM) is a Ctrl-C: the run cancels its jobs and exits."""
    import signal

    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def typed() -> tuple[str, ...]:
    """The command as a person types it: `claw` and the arguments it was given (cli.py keeps
    them), whether it started as a venv's script, `python -m claw_batch` or a git hook."""
    root = click.get_current_context().find_root()
    return ("claw", *root.meta.get("claw.args", sys.argv[1:]))

"""claw's exceptions, a shallow tree whose leaves carry the process exit code.

    ClawError (1)
    ├── UsageError (2)            bad command line: unknown task, conflicting flags
    ├── ClawfileError (2)         clawfile.yaml or a template is invalid
    ├── ReplayMismatch (2)        --replay met a request that was never recorded
    ├── TaskFailed (1)            a job failed: empty answer, invalid JSON, failed check
    │   └── ModelError (1)        the endpoint answered with an error we do not retry
    ├── LimitExceeded (3)         max_steps, timeout, a loop of identical calls, budget
    ├── Locked (75)               another `claw run` holds the project lock
    └── Interrupted (130)         SIGINT / SIGTERM

Tool failures are not exceptions of this tree: they go back to the model as error results
(`ToolError`), and the run goes on.
"""

from __future__ import annotations


class ClawError(Exception):
    exit_code = 1


def said(message: object) -> str:
    """`message` as claw says it on stderr: every line starts `claw: `, so that each problem
    of a many-problem error reads (and greps) like a one-problem error."""
    return "\n".join(f"claw: {line}" for line in str(message).splitlines() or [""])


class UsageError(ClawError):
    exit_code = 2


class ClawfileError(ClawError):
    exit_code = 2


class ReplayMismatch(ClawError):
    exit_code = 2


class TaskFailed(ClawError):
    exit_code = 1


class ModelError(TaskFailed):
    pass


class LimitExceeded(ClawError):
    exit_code = 3


class Locked(ClawError):
    exit_code = 75


class Interrupted(ClawError):
    exit_code = 130


class ToolError(Exception):
    """A tool call that cannot be carried out; its message goes back to the model (`fenced`:
    as it is, outside content already fenced, else after "error: ")."""

    def __init__(self, message: str, *, fenced: bool = False) -> None:
        super().__init__(message)
        self.fenced = fenced

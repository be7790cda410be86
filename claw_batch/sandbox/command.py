"""A command about to start, and what turns it into one that runs confined: the seam between
the bash tool and the sandbox."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from claw_batch.sandbox.ceilings import Ceilings


@dataclass(frozen=True)
class Command:
    """A command line ready to start, with the environment it starts from and the file
    descriptors it inherits."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    pass_fds: tuple[int, ...] = ()
    # A pipe on which the command reports, as a JSON line {"child-pid": N}, the process
    # whose exit means that everything it started is gone (a sandbox's PID 1).
    leader: int | None = None
    ceilings: Ceilings | None = None  # what all its processes together may use, watched


class Sandbox(Protocol):
    """Turns a command into one that runs confined (`sandbox.Bubblewrap`). The context
    manager keeps what the confined command needs (open directories) until it has started."""

    @property
    def name(self) -> str: ...

    def wrap(
        self, command: Command, *, cwd: Path, seconds: float
    ) -> AbstractContextManager[Command]: ...

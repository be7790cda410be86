"""What every tool gets and what a tool is.

A tool is a plain typed Python function `fn(ctx, *, arg: T = default, ...) -> str`.
Its JSON Schema and its argument validation are derived from the signature with pydantic;
nothing here is hand-written JSON Schema.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from claw_batch.paths import Policy


class Sandbox(Protocol):
    """Wraps a command line so that it runs confined. The OS sandbox (bubblewrap) plugs in here."""

    name: str

    def wrap(self, argv: list[str], *, cwd: Path) -> list[str]: ...


@dataclass(frozen=True)
class ToolContext:
    root: Path  # the project root, resolved
    policy: Policy  # read/write confinement
    env: Mapping[str, str]  # the scrubbed environment child processes start from
    deadline: float  # time.monotonic() by which the job must end
    bash_allow: tuple[str, ...] | bool = False  # permissions.bash: patterns, True, or off
    sandbox: Sandbox | None = None
    workspace: str = "workspace"  # project-relative: where MEMORY.md and memory/ live
    today: dt.date | None = None  # the run's date (CLAW_NOW pins it); None: the machine's
    untrusted: str | None = None  # the job reads untrusted content: this (what remember marks)


ToolFn = Callable[..., str]

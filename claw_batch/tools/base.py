"""What every tool gets and what a tool is.

A tool is a plain typed Python function `fn(ctx, *, arg: T = default, ...) -> str`.
Its JSON Schema and its argument validation are derived from the signature with pydantic;
nothing here is hand-written JSON Schema.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from claw_batch.safety.paths import Policy
from claw_batch.taint.jobtaint import JobTaint

if TYPE_CHECKING:
    from claw_batch.sandbox.command import Sandbox


class Delegate(Protocol):
    """What the `delegate` tool calls to run a sub-job (claw_batch.run.delegation): a task
    of the clawfile with `input` as its template variable, or with `prompt` an ad-hoc one
    with the parent's model and `tools` (a subset of the parent's; None: all of them). It
    returns the sub-job's final answer; a refusal or a sub-job that did not end ok is a
    ToolError, which the model gets as an error result. `width`: how many of one turn's
    calls run at once (the run's -j: more would only wait for a slot)."""

    @property
    def width(self) -> int: ...

    def __call__(
        self,
        *,
        task: str | None,
        input: Mapping[str, Any],
        prompt: str | None,
        tools: tuple[str, ...] | None,
    ) -> str: ...


@dataclass(frozen=True)
class ToolContext:
    root: Path  # the project root, resolved
    policy: Policy  # read/write confinement
    env: Mapping[str, str]  # the scrubbed environment child processes start from
    deadline: float  # time.monotonic() by which the job must end
    bash_allow: tuple[str, ...] | bool = False  # permissions.bash: patterns, True, or off
    sandbox: Sandbox | None = None  # None: bash runs unsandboxed (`sandbox: none`)
    workspace: str = "workspace"  # project-relative: where MEMORY.md and memory/ live
    today: dt.date | None = None  # the run's date (CLAW_NOW pins it); None: the machine's
    # What the job has read from outside (claw_batch.taint.jobtaint): the tools fence what is
    # outside through it, remember marks facts with it, the tool loop refuses what it withholds.
    taint: JobTaint = field(default_factory=JobTaint)
    on_event: Callable[..., Any] | None = None  # the transcript: on_event(kind, **fields)
    redact: Callable[[str], str] = str  # what a tool keeps (MEMORY.md) holds no secret
    job: str = ""  # the job's name (a recorded MCP reply is the job's)
    # The MCP tools (mcp.SERVER.TOOL) the job called, in order: what `always:` reads next time
    called: list[str] = field(default_factory=list)
    # Runs the job's sub-jobs (`delegate`); None: its task does not list the tool
    delegate: Delegate | None = None


ToolFn = Callable[..., str]

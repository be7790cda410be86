"""delegate: a job starts a sub-job and gets its final answer (claw_batch.run.delegation
runs it: a job of its own, fingerprinted, cached, sandboxed, budgeted from its parent)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from claw_batch.errors import ToolError
from claw_batch.tools.base import ToolContext


def delegate(
    ctx: ToolContext,
    *,
    task: Annotated[str | None, Field(description="one of your task's delegate.tasks")] = None,
    input: Annotated[dict[str, Any] | None, Field(description="that task's input")] = None,
    prompt: Annotated[str | None, Field(description="or: an ad-hoc sub-job's instructions")] = None,
    tools: Annotated[
        list[str] | None,
        Field(description="ad-hoc: some of your tools (default: all)"),
    ] = None,
) -> str:
    """Run a sub-job; returns its final answer. Calls in one turn run in parallel."""
    if ctx.delegate is None:
        raise ToolError("delegate is not available to this job")
    if (task is None) == (prompt is None):
        raise ToolError("give either task (with input) or prompt, not both and not neither")
    return ctx.delegate(
        task=task,
        input=input or {},
        prompt=prompt,
        tools=None if tools is None else tuple(tools),
    )

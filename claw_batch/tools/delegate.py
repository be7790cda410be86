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
    task: Annotated[
        str | None, Field(description="a task this one may delegate to (its `delegate.tasks`)")
    ] = None,
    input: Annotated[
        dict[str, Any] | None, Field(description="the task's `input` template variable")
    ] = None,
    prompt: Annotated[
        str | None, Field(description="instead of a task: what an ad-hoc sub-job is to do")
    ] = None,
    tools: Annotated[
        list[str] | None,
        Field(description="an ad-hoc sub-job's tools, among yours (default: yours)"),
    ] = None,
) -> str:
    """Run a sub-job and return its final answer; calls in one turn run in parallel."""
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

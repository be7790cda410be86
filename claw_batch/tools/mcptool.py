"""An MCP server's tool as the tool loop calls it, like a built-in: its arguments checked
against the server's input schema (jsonschema), then the call, bounded by the tool's timeout
and the job's deadline, with the baton handed on meanwhile. What it returns is outside
content: fenced, and it taints the job (claw_batch.taint.jobtaint) — its error replies and
failures too, as the tool's error result; and so is every file the server made or changed
in its write directories during the call. A result is cut at MAX_RESULT_CHARS.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from claw_batch import baton
from claw_batch.errors import LimitExceeded, ToolError
from claw_batch.mcp.catalog import scrubbed
from claw_batch.mcp.remote import Reply, ServerFailure
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import Tool, _parse_arguments

if TYPE_CHECKING:
    from jsonschema.protocols import Validator


class McpCaller(Protocol):
    """Who answers a call: the run's servers, or a cassette (claw_batch.run.servers)."""

    def call(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout: float, job: str
    ) -> Reply: ...


# What one result hands the model at most, as `read` hands it a file: a result is something the
# model asked for and reads (a page, a record), not a command's log whose tail matters (bash's
# 30 KB); a server that answers megabytes would fill the context and the bill at every turn.
MAX_RESULT_CHARS = 50_000


def capped(text: str) -> str:
    return text[:MAX_RESULT_CHARS]


def _footer(text: str) -> str:
    """Claw's words after a result it cut, outside the fence: how much the model did not get."""
    if len(text) <= MAX_RESULT_CHARS:
        return ""
    return (
        f"\n[MCP result cut: the first {MAX_RESULT_CHARS:,} of {len(text):,} characters are shown]"
    )


def _unused() -> Any:
    raise AssertionError("an MCP tool has no function")


@dataclass(frozen=True)
class McpTool(Tool):
    server: str = ""
    remote: str = ""  # the tool's name on its server
    timeout: float = 60.0  # the server entry's, for one call
    caller: McpCaller | None = field(default=None, repr=False, compare=False)
    dirs: tuple[str, ...] = ()  # where its server may write ("" is the project root)

    @classmethod
    def of(
        cls,
        server: str,
        remote: str,
        wire: str,
        description: str,
        schema: Mapping[str, Any],
        *,
        timeout: float,
        caller: McpCaller,
        dirs: tuple[str, ...] = (),
    ) -> McpTool:
        # The server's words reach the model unfenced: invisible characters and chat-template
        # tokens are taken out of every string of them, the schema's nested descriptions too
        # (and the run's secrets, where the list was fetched: claw_batch.run.servers).
        cleaned = scrubbed(description)
        said = f"[MCP server {server!r}, tool {remote!r}] {cleaned}".strip()
        parameters = scrubbed(dict(schema)) or {"type": "object", "properties": {}}
        return cls(wire, said, parameters, _unused, server, remote, timeout, caller, dirs)

    @property
    def qualified(self) -> str:
        return f"mcp.{self.server}.{self.remote}"

    def load(self) -> None:
        self._validator  # noqa: B018

    def invoke(self, ctx: ToolContext, arguments: str) -> str:
        raw = _parse_arguments(arguments)
        self._check(raw)
        left = ctx.deadline - time.monotonic()
        if left <= 0:
            raise LimitExceeded("timeout: the job ran out of time before an MCP tool call")
        caller = self.caller
        assert caller is not None
        ctx.called.append(self.qualified)
        got: list[Reply | ServerFailure] = []

        def ask() -> str:
            try:
                with baton.released():  # other jobs run while the server works
                    got.append(
                        caller.call(self.server, self.remote, raw, timeout=timeout, job=ctx.job)
                    )
            except ServerFailure as e:
                got.append(e)
            return ""

        timeout = min(self.timeout, left)
        # What the server writes meanwhile is outside content (claw_batch.taint.jobtaint).
        ctx.taint.server_call(f"MCP server {self.server!r}", str(ctx.root), self.dirs, ask)
        (reply,) = got
        source = f"MCP {self.server}: {self.remote}"
        # Outside content: fenced, and the job is tainted from now on — a result, an error
        # reply and what the server said about a failure alike (claw's own words about it,
        # a timeout, are not the server's). Redacted first: the fence's id is the text's, as
        # a cassette keeps it.
        if isinstance(reply, ServerFailure):
            failed = f"MCP server {self.server!r}: {self.remote} failed: {reply.message}"
            if reply.said:
                failed += "; the server said:\n" + ctx.taint.fenced(ctx.redact(reply.said), source)
            raise ToolError(failed)
        text = ctx.taint.fenced(ctx.redact(capped(reply.text)), source)
        if reply.is_error:
            raise ToolError(f"{self.server}: {self.remote} answered with an error:\n{text}")
        return text + _footer(reply.text)

    def _check(self, raw: dict[str, Any]) -> None:
        validator = self._validator
        if validator is None:
            return
        errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "arguments"
            raise ToolError(
                f"invalid arguments for {self.name} ({where}): {first.message}"
                + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
            )

    @functools.cached_property
    def _validator(self) -> Validator | None:
        """The schema's validator; None when the server's schema is no valid JSON Schema
        (the server checks the call itself)."""
        import jsonschema

        schema = dict(self.parameters)
        cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError:
            return None
        validator: Validator = cls(schema)
        return validator


def describe(tool: Tool) -> str | None:
    """The server of an MCP tool (what transcripts name), None for a built-in."""
    return tool.server if isinstance(tool, McpTool) else None

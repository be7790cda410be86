"""An MCP server's tool as the tool loop calls it, like a built-in: its arguments checked
against the server's input schema (jsonschema), then the call, bounded by the tool's timeout
and the job's deadline. What it returns is outside content: fenced, and it taints the job
(claw_batch.taint.jobtaint). A server's error reply or failure is the tool's error result.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from claw_batch.errors import LimitExceeded, ToolError
from claw_batch.mcp.remote import Reply
from claw_batch.safety.untrusted import defuse_tokens, strip_invisible
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import Tool, _parse_arguments

if TYPE_CHECKING:
    from jsonschema.protocols import Validator


class McpCaller(Protocol):
    """Who answers a call: the run's servers, or a cassette (claw_batch.run.servers)."""

    def call(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout: float, job: str
    ) -> Reply: ...


def _unused() -> Any:
    raise AssertionError("an MCP tool has no function")


@dataclass(frozen=True)
class McpTool(Tool):
    server: str = ""
    remote: str = ""  # the tool's name on its server
    timeout: float = 60.0  # the server entry's, for one call
    caller: McpCaller | None = field(default=None, repr=False, compare=False)

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
    ) -> McpTool:
        # The server's words reach the model unfenced: invisible characters and chat-template
        # tokens in them are taken out, as they are from fenced content.
        cleaned = defuse_tokens(strip_invisible(description)[0])[0]
        said = f"[MCP server {server!r}, tool {remote!r}] {cleaned}".strip()
        parameters = dict(schema) or {"type": "object", "properties": {}}
        return cls(wire, said, parameters, _unused, server, remote, timeout, caller)

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
        assert self.caller is not None
        ctx.called.append(self.qualified)
        reply = self.caller.call(
            self.server, self.remote, raw, timeout=min(self.timeout, left), job=ctx.job
        )
        source = f"MCP {self.server}: {self.remote}"
        # Outside content: fenced, and the job is tainted from now on. Redacted first: the
        # fence's id is the text's, as a cassette keeps it.
        text = ctx.taint.fenced(ctx.redact(reply.text), source)
        if reply.is_error:
            raise ToolError(f"{self.server}: {self.remote} answered with an error:\n{text}")
        return text

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

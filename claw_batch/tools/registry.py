"""The tools, keyed by name, with schemas and validation derived from their typed signatures
(claw_batch.tools.signature).

A built-in tool's description and schema are read from claw_batch.tools.schemas, where they
were derived once; its code, and pydantic to validate its calls, are imported when it is first
called. So a run sends its first request, which carries the schemas, without either.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from claw_batch.errors import ToolError
from claw_batch.llm.messages import ToolSpec
from claw_batch.tools.base import ToolContext, ToolFn
from claw_batch.tools.schemas import SPECS

if TYPE_CHECKING:
    import pydantic


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]  # the JSON Schema of its arguments, as the model is sent it
    function: Callable[[], ToolFn] = field(repr=False, compare=False)  # its code, on demand

    def spec(self) -> ToolSpec:
        return self._spec

    def invoke(self, ctx: ToolContext, arguments: str) -> str:
        from claw_batch.tools import signature

        raw = _parse_arguments(arguments)
        fn, params = self._checked
        return fn(ctx, **signature.validate(self.name, params, raw))

    def load(self) -> None:
        """Import its code and build its validator now, not at its first call."""
        self._checked  # noqa: B018

    @functools.cached_property
    def _spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    @functools.cached_property
    def _checked(self) -> tuple[ToolFn, type[pydantic.BaseModel]]:
        from claw_batch.tools import signature

        fn = self.function()
        return fn, signature.params_model(self.name, fn)


def tool(description: str | None = None, *, name: str | None = None) -> Callable[[ToolFn], Tool]:
    """Build a Tool from a function; the description defaults to its docstring."""
    from claw_batch.tools import signature

    def build(fn: ToolFn) -> Tool:
        tool_name = name or fn.__name__
        doc = " ".join(description.split()) if description else signature.description(tool_name, fn)
        schema = signature.json_schema(signature.params_model(tool_name, fn))
        return Tool(tool_name, doc, schema, lambda: fn)

    return build


def _parse_arguments(arguments: str) -> dict[str, Any]:
    if not arguments.strip():  # some models send "" for a call without arguments
        return {}
    try:
        raw = json.loads(arguments)
    except json.JSONDecodeError as e:
        raise ToolError(f"invalid JSON arguments: {e}") from None
    except RecursionError:
        raise ToolError("invalid JSON arguments: nested deeper than claw reads") from None
    if not isinstance(raw, dict):
        raise ToolError(f"arguments must be a JSON object, not {type(raw).__name__}")
    return raw


def _code(module: str, name: str) -> ToolFn:
    fn: ToolFn = getattr(importlib.import_module(f"claw_batch.tools.{module}"), name)
    return fn


# Each built-in tool: the module of claw_batch.tools its function is in.
BUILT_IN: dict[str, str] = {
    "read": "files",
    "write": "files",
    "edit": "files",
    "bash": "bash",
    "grep": "grep",
    "ls": "files",
    "find": "files",
    "remember": "memory",
    "memory_search": "memory",
    "delegate": "delegate",
}
TOOLS: dict[str, Tool] = {
    name: Tool(name, *SPECS[name], functools.partial(_code, module, name))
    for name, module in BUILT_IN.items()
}

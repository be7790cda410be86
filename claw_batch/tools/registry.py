"""The tools, keyed by name, with schemas and validation derived from their typed signatures.

A tool function looks like `fn(ctx: ToolContext, *, path: str, offset: int | None = None) -> str`;
its docstring is the description the model sees, and `typing.Annotated[..., Field(...)]` adds
per-argument descriptions and bounds. pydantic builds the JSON Schema and validates the calls.
"""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from claw_batch.errors import ToolError
from claw_batch.llm.messages import ToolSpec
from claw_batch.tools import bash, files, grep, memory
from claw_batch.tools.base import ToolContext, ToolFn

# Schema keys whose values are data, not subschemas: "title" inside them is not noise.
_DATA_KEYS = frozenset({"default", "enum", "const", "examples"})


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    fn: ToolFn
    params: type[pydantic.BaseModel]

    def spec(self) -> ToolSpec:
        return _spec(self.name, self.description, self.params)

    def invoke(self, ctx: ToolContext, arguments: str) -> str:
        raw = _parse_arguments(arguments)
        try:
            args = self.params.model_validate(raw)
        except pydantic.ValidationError as e:
            problems = "; ".join(_describe(err, self.params) for err in e.errors())
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        return self.fn(ctx, **{name: getattr(args, name) for name in self.params.model_fields})


@functools.cache
def _spec(name: str, description: str, params: type[pydantic.BaseModel]) -> ToolSpec:
    """Built once per tool: pydantic's schema generation costs about a millisecond."""
    schema = _clean_schema(params.model_json_schema())
    schema["required"] = list(schema.get("required", []))  # [] too: some servers want it
    # Unknown arguments are refused when a call is validated (extra="forbid"); saying so in
    # every request costs the prompt ~60 tokens.
    schema.pop("additionalProperties", None)
    return ToolSpec(name=name, description=description, parameters=schema)


def tool(description: str | None = None, *, name: str | None = None) -> Callable[[ToolFn], Tool]:
    """Build a Tool from a function; the description defaults to its docstring."""

    def build(fn: ToolFn) -> Tool:
        tool_name = name or fn.__name__
        doc = description or inspect.getdoc(fn)
        if not doc:
            raise TypeError(f"tool {tool_name} needs a description or a docstring")
        return Tool(tool_name, " ".join(doc.split()), fn, _params_model(tool_name, fn))

    return build


def _params_model(tool_name: str, fn: ToolFn) -> type[pydantic.BaseModel]:
    hints = typing.get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())[1:]  # the first one is ctx
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"tool {tool_name}: argument {p.name} must be keyword-only")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (hints[p.name], default)
    config = pydantic.ConfigDict(extra="forbid")
    model: type[pydantic.BaseModel] = pydantic.create_model(
        f"{tool_name}_arguments", __config__=config, **fields
    )
    return model


def _clean_schema(schema: Any) -> Any:
    """Drop pydantic's generated titles and spell `X | None = None` as an optional `X`."""
    if isinstance(schema, list):
        return [_clean_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties":  # its keys are argument names (even "title"), never noise
            out[key] = {name: _clean_schema(s) for name, s in value.items()}
        elif not (key == "title" and isinstance(value, str)):
            out[key] = value if key in _DATA_KEYS else _clean_schema(value)
    if out.get("type") == "boolean" and out.get("default") is False:
        del out["default"]  # an optional flag is off unless given: no need to say so
    variants = out.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
        del out["anyOf"]
        out.update(next(v for v in variants if v != {"type": "null"}))
        if "default" in out and out["default"] is None:
            del out["default"]
    return out


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


def _describe(err: Mapping[str, Any], params: type[pydantic.BaseModel]) -> str:
    where = ".".join(str(part) for part in err["loc"]) or "arguments"
    if err["type"] == "extra_forbidden":
        known = ", ".join(params.model_fields) or "none"
        return f"unknown argument {where!r} (known: {known})"
    if err["type"] == "missing":
        return f"{where}: missing (required)"
    return f"{where}: {err['msg']}"


_FUNCTIONS: tuple[ToolFn, ...] = (
    files.read,
    files.write,
    files.edit,
    bash.bash,
    grep.grep,
    files.ls,
    files.find,
    memory.remember,
    memory.memory_search,
)
TOOLS: dict[str, Tool] = {t.name: t for t in map(tool(), _FUNCTIONS)}

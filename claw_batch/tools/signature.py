"""A tool's arguments derived from its typed signature with pydantic: the model that validates
a call, and the JSON Schema the model is sent.

A tool function looks like `fn(ctx: ToolContext, *, path: str, offset: int | None = None) -> str`;
`typing.Annotated[..., Field(...)]` adds per-argument descriptions and bounds. The built-in
tools' schemas are derived here once and kept in claw_batch.tools.schemas, so that a run sends
its first request without importing pydantic (~0.1 s); a test derives them again and compares
(claw_batch.tools.schemagen writes them).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping
from typing import Any

import pydantic

from claw_batch.errors import ToolError
from claw_batch.tools.base import ToolFn

# Schema keys whose values are data, not subschemas: "title" inside them is not noise.
_DATA_KEYS = frozenset({"default", "enum", "const", "examples"})


def description(tool_name: str, fn: ToolFn) -> str:
    doc = inspect.getdoc(fn)
    if not doc:
        raise TypeError(f"tool {tool_name} needs a description or a docstring")
    return " ".join(doc.split())


def params_model(tool_name: str, fn: ToolFn) -> type[pydantic.BaseModel]:
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


def json_schema(params: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The schema the model is sent (pydantic's schema generation costs about a millisecond)."""
    schema: dict[str, Any] = _clean_schema(params.model_json_schema())
    schema["required"] = list(schema.get("required", []))  # [] too: some servers want it
    # Unknown arguments are refused when a call is validated (extra="forbid"); saying so in
    # every request costs the prompt ~60 tokens.
    schema.pop("additionalProperties", None)
    return schema


def validate(tool_name: str, params: type[pydantic.BaseModel], raw: Any) -> dict[str, Any]:
    """The call's keyword arguments, defaults filled in; ToolError says what is wrong."""
    try:
        args = params.model_validate(raw)
    except pydantic.ValidationError as e:
        problems = "; ".join(_describe(err, params) for err in e.errors())
        raise ToolError(f"invalid arguments for {tool_name}: {problems}") from None
    return {name: getattr(args, name) for name in params.model_fields}


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


def _describe(err: Mapping[str, Any], params: type[pydantic.BaseModel]) -> str:
    where = ".".join(str(part) for part in err["loc"]) or "arguments"
    if err["type"] == "extra_forbidden":
        known = ", ".join(params.model_fields) or "none"
        return f"unknown argument {where!r} (known: {known})"
    if err["type"] == "missing":
        return f"{where}: missing (required)"
    return f"{where}: {err['msg']}"

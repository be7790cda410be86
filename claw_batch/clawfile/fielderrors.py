"""Pydantic's validation errors, said the way a user of a YAML file needs them:
`clawfile.yaml:14: tasks.summary.max_steps: expected an integer, got 'many'`.

A model can give a better message than "unknown key" for keys users are known to try, with a
`refused_keys: ClassVar[dict[str, str]]` (key -> message).
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from claw_batch.clawfile.yamlsource import Problem, YamlSource
from claw_batch.config import KeyPath

_EXPECTED = {
    **dict.fromkeys(("int_type", "int_parsing", "int_from_float"), "an integer"),
    **dict.fromkeys(("float_type", "float_parsing"), "a number"),
    "finite_number": "a finite number",  # .inf, .nan, 1e400
    **dict.fromkeys(("bool_type", "bool_parsing"), "true or false"),
    **dict.fromkeys(("string_type", "string_sub_type"), "a string"),
    **dict.fromkeys(("list_type", "tuple_type"), "a list"),
    **dict.fromkeys(("dict_type", "model_type", "model_attributes_type"), "a mapping"),
}


def problems(exc: ValidationError, model: type[BaseModel], source: YamlSource) -> list[Problem]:
    errors = exc.errors()
    for error in errors:
        # pydantic's marker of a dict key's own error follows the key; a first `[key]` is a
        # key the file itself named so (`'[key]': null`)
        loc = error["loc"]
        error["loc"] = tuple(part for i, part in enumerate(loc) if part != "[key]" or i == 0)
    # After "unknown key 'promt' (did you mean 'prompt'?)", "missing required key 'prompt'"
    # would only say the same thing again.
    hinted = {
        (error["loc"][:-1], _suggestion(model_at(model, error["loc"][:-1]), error["loc"][-1]))
        for error in errors
        if error["type"] == "extra_forbidden"
    }
    return [
        _problem(error, model, source)
        for error in errors
        if error["type"] != "missing" or (error["loc"][:-1], error["loc"][-1]) not in hinted
    ]


def _problem(error: ErrorDetails, model: type[BaseModel], source: YamlSource) -> Problem:
    loc = error["loc"]
    if error["type"] == "missing":
        return source.problem(loc[:-1], f"missing required key {loc[-1]!r}")
    if error["type"] == "extra_forbidden":
        return source.problem(loc[:-1], _unknown_key(model_at(model, loc[:-1]), loc[-1]), at=loc)
    return source.problem(loc, _message(error))


def _message(error: ErrorDetails) -> str:
    kind, ctx, got = error["type"], error.get("ctx", {}), describe(error["input"])
    if kind == "claw":  # our own validators: the message is final
        return error["msg"]
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {got}"
    if kind == "literal_error":
        return f"expected {ctx['expected']}, got {got}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']:g}, got {got}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']:g}, got {got}"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']:g}, got {got}"
    return error["msg"][:1].lower() + error["msg"][1:]


def _unknown_key(model: type[BaseModel] | None, key: str | int) -> str:
    refused: dict[str, str] = getattr(model, "refused_keys", {})
    if str(key) in refused:
        return refused[str(key)]
    close = _suggestion(model, key)
    hint = f"did you mean {close!r}?" if close else f"valid keys: {', '.join(_keys(model))}"
    return f"unknown key {key!r} ({hint})"


def _suggestion(model: type[BaseModel] | None, key: str | int) -> str | None:
    close = difflib.get_close_matches(str(key), _keys(model), n=1)
    return close[0] if close else None


def _keys(model: type[BaseModel] | None) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()] if model else []


def model_at(model: type[BaseModel], path: KeyPath) -> type[BaseModel] | None:
    """The model that validates the mapping at `path`, e.g. Task for ('tasks', 'x')."""
    current: Any = model
    for part in path:
        current = _bare(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = {field.alias or name: field for name, field in current.model_fields.items()}
            if part not in fields:
                return None
            current = fields[str(part)].annotation
        elif get_origin(current) in (dict, list):
            current = get_args(current)[-1]
        else:
            return None
    current = _bare(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _bare(annotation: Any) -> Any:
    """`Annotated[X, ...] | None` -> X."""
    if get_origin(annotation) in (Union, types.UnionType):
        options = [arg for arg in get_args(annotation) if arg is not type(None)]
        annotation = options[0] if len(options) == 1 else annotation
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


_KINDS = {list: "a list", dict: "a mapping", type(None): "an empty value"}


def describe(value: object) -> str:
    """A YAML value as an error message shows it: 'many', 12, true, a list, an empty value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    return _KINDS.get(type(value), f"a {type(value).__name__}")

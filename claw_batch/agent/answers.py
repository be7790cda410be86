"""Final answers that must be JSON: `schema:` tasks and `check: true` verdicts (SPEC §6)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["ok", "summary", "findings"],
    "properties": {
        "ok": {"type": "boolean"},
        "summary": {"type": "string"},
        "findings": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"type": "string"},
                    {
                        "type": "object",
                        "required": ["message"],
                        "properties": {
                            "file": {"type": "string"},
                            "line": {"type": "integer"},
                            "message": {"type": "string"},
                        },
                    },
                ]
            },
        },
    },
}

FENCE = re.compile(r"\A```(?:json)?\s*\n(.*?)\n```\s*\Z", re.DOTALL)


def instructions(schema: Mapping[str, Any], *, check: bool) -> str:
    """What goes before the task's prompt: the same for every job of the task, so it belongs
    to the prefix they share (providers' prefix caches); the job's own prompt follows."""
    lead = (
        "End the task below with a verdict: ok is false when anything must be fixed before "
        "this can go in."
        if check
        else "Answer the task below with the result as JSON."
    )
    return (
        f"{lead} Your final message must be only a JSON document (no prose, no code "
        f"fence) that validates against this JSON Schema:\n"
        f"{json.dumps(schema, indent=None, sort_keys=True)}\n\n---\n\n"
    )


def reminder(*, check: bool) -> str:
    """What goes after the task's prompt: a line, so that what the model reads last is
    still claw's instruction, not the end of a diff or a file from outside the prompt
    quotes; the schema itself is in the shared part before (`instructions`)."""
    answer = "the verdict" if check else "the JSON document"
    return f"\n\n---\nYour final message: only {answer} the JSON Schema above describes.\n"


def parse(text: str) -> Any:
    """The JSON in a final answer; a ```json fence around it is tolerated."""
    m = FENCE.match(text.strip())
    try:
        return json.loads(m.group(1) if m else text)
    except RecursionError:
        raise ValueError("nested deeper than claw reads") from None


def problem(text: str, schema: Mapping[str, Any]) -> str | None:
    """What is wrong with the answer, phrased for the model, or None."""
    import jsonschema  # only schema and check tasks pay for it

    try:
        document = parse(text)
    except ValueError as e:
        return f"Your final answer is not valid JSON ({e}). Reply with only the JSON document."
    error = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema)(schema).iter_errors(document)
    )
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return (
        f"Your final answer does not match the schema: at {where}: {error.message}. "
        "Reply with only the corrected JSON document."
    )


def checker(schema: Mapping[str, Any]) -> Callable[[str], str | None]:
    return lambda text: problem(text, schema)


def normalise(text: str) -> str:
    return json.dumps(parse(text), indent=2, ensure_ascii=False) + "\n"


def findings_text(verdict: Mapping[str, Any]) -> list[str]:
    lines = []
    for f in verdict.get("findings", []):
        if isinstance(f, str):
            lines.append(f"- {f}")
        else:
            where = f.get("file", "")
            if where and f.get("line") is not None:
                where += f":{f['line']}"
            lines.append(f"- {where + ': ' if where else ''}{f.get('message', '')}")
    return lines

"""Tool calls written into `content`: what a model sends when the server's tool parser is off
(vLLM without `--enable-auto-tool-choice`, llama.cpp without `--jinja`, an Ollama template
without tool support). Three dialects, as their models write them:

- hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, a block per call (Qwen
  2.5 and 3, Hermes, QwQ and most fine-tunes); in the block, Qwen3-Coder's
  `<function=name><parameter=key>value</parameter></function>` too;
- mistral: `[TOOL_CALLS]` and a JSON list of {"name", "arguments"} (Mistral 7B v0.3, Nemo),
  or `[TOOL_CALLS]name{...}` / `[TOOL_CALLS]name[ARGS]{...}` (later tokenizers);
- llama: `<|python_tag|>` and {"name", "parameters"} objects separated by `;` (Llama 3.1 to
  3.3).

A server that drops special tokens from the text drops `[TOOL_CALLS]` and `<|python_tag|>`:
a bare list of Mistral calls or bare Llama objects count when they are the whole reply and
every call names a tool the task offers.

What keeps an answer that *quotes* the syntax an answer: markup counts only at top level, its
opening token first on a line and outside fenced code blocks (a reply that is nothing but one
fenced block is read inside it), and bare JSON only as said above. The text around the
markup, a leading think block included, is the message's content. Names in markup are not
checked here: a call of a tool the task lacks is answered as the loop answers any such call.

What keeps half a call from running: markup in a reply cut off by the token limit
(`finish_reason: "length"`) is a problem, never calls, whatever it looks like. Qwen3-Coder's
closing tags count: a `<parameter=…>` ends at `</parameter>` (or where the next
`<parameter=` opens), a `<function=…>` at `</function>`; where the text ends first, the call
is unreadable. A `<tool_call>` block that the reply ends inside, with no `</tool_call>`, is
read when what it holds is whole by its own syntax: JSON that parses, or a closed
`<function=…>` (JSON cut in two does not parse).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from claw_batch.llm import thinking
from claw_batch.llm.messages import ToolCall

PYTHON_TAG = "<|python_tag|>"
MISTRAL = "[TOOL_CALLS]"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
# The last group is "" where the text ended before the closing tag: unreadable, not a call.
_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|(\Z))", re.DOTALL)
_PARAMETER = re.compile(
    r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|(\Z))", re.DOTALL
)
_MISTRAL_NAME = re.compile(r"([A-Za-z0-9_.-]+)(?:\[ARGS\])?")
_FENCED = re.compile(r"\A\s*(```|~~~)[\w+-]*[ \t]*\n(.*?)\n[ \t]*\1[ \t]*\Z", re.DOTALL)
_BARE_KEYS = frozenset({"type", "name", "parameters", "arguments", "id"})
EXCERPT = 60

Found = tuple[str, str]  # a call's name and its arguments as JSON text


class _Unreadable(Exception):
    """Markup that is not what its dialect writes; the message says what was wrong."""


@dataclass(frozen=True)
class Markup:
    dialect: str  # "hermes", "mistral", "llama"
    content: str | None  # the text around the markup; None when there is none
    calls: tuple[ToolCall, ...] = ()
    problem: str | None = None  # why the markup could not be read (then there are no calls)


def recover(
    text: str,
    offered: Collection[str],
    step: int,
    *,
    cut_off: bool = False,
    reasoning_apart: bool = False,
) -> Markup | None:
    """The tool calls `text` holds as markup, or None when it holds none at top level.
    Ids are made from the turn (`step`): the same reply always gets the same ids. Markup in
    a reply `cut_off` by the token limit is a problem, whatever it looks like;
    `reasoning_apart` as `thinking.split` takes it."""
    head, body = thinking.split(text, reasoning_apart=reasoning_apart)
    fenced = _FENCED.match(body)
    body = fenced.group(2) if fenced else body
    found = [(at, d) for d, token in MARKERS if (at := _top_level(body, token)) is not None]
    if not found:
        bare = _bare(head, body, offered, step)
        return _cut(bare.dialect, bare.content) if bare and cut_off else bare
    at, dialect = min(found)
    if cut_off:
        return _cut(dialect, _text(head + body[:at]))
    try:
        calls, after = READERS[dialect](body[at:])
    except _Unreadable as exc:
        return Markup(dialect, _text(head + body[:at]), problem=f"{dialect} {exc}")
    return Markup(dialect, _text(head + body[:at] + after), _numbered(calls, step))


def _cut(dialect: str, content: str | None) -> Markup:
    return Markup(dialect, content, problem=f"{dialect} tool call cut off by the token limit")


def _hermes(tail: str) -> tuple[list[Found], str]:
    calls, rest, pos = [], [], 0
    for n, m in enumerate(_BLOCK.finditer(tail), 1):
        rest.append(tail[pos : m.start()])
        pos = m.end()
        body = m.group(1).strip()
        calls.append(_xml_call(body, n) if body.startswith("<") else _json_call(body, n))
    return calls, "".join([*rest, tail[pos:]])


def _mistral(tail: str) -> tuple[list[Found], str]:
    calls: list[Found] = []
    pos = 0
    while tail.startswith(MISTRAL, pos):
        pos = _skip_space(tail, pos + len(MISTRAL))
        n = len(calls) + 1
        if tail[pos : pos + 1] in ("[", "{"):
            value, pos = _decode(tail, pos, n)
            items = value if isinstance(value, list) else [value]
            calls.extend(_named(item, n + i) for i, item in enumerate(items))
        else:
            m = _MISTRAL_NAME.match(tail, pos)
            if m is None:
                raise _Unreadable(f"tool call {n} has no name: {_excerpt(tail[pos:])}")
            arguments, pos = _decode(tail, _skip_space(tail, m.end()), n)
            calls.append((m.group(1), _arguments(arguments)))
        pos = _skip_space(tail, pos)
    return calls, tail[pos:]


def _llama(tail: str) -> tuple[list[Found], str]:
    values, end = _objects(tail, len(PYTHON_TAG))
    return [_named(v, n) for n, v in enumerate(values, 1)], tail[end:]


MARKERS = (("hermes", "<tool_call>"), ("mistral", MISTRAL), ("llama", PYTHON_TAG))
READERS: dict[str, Callable[[str], tuple[list[Found], str]]] = {
    "hermes": _hermes,
    "mistral": _mistral,
    "llama": _llama,
}


def _bare(head: str, body: str, offered: Collection[str], step: int) -> Markup | None:
    """Calls without their token, which a server that drops special tokens from the text
    removes: Llama 3's {"name": ..., "parameters": {...}} (`;` between calls), Mistral's
    [{"name": ..., "arguments": {...}}]. Only as the whole reply, and only naming offered
    tools: a JSON answer that happens to have a "name" stays an answer."""
    stripped = body.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        values, end = _objects(stripped, 0)
    except _Unreadable:
        return None
    dialect = "mistral" if stripped.startswith("[") else "llama"
    if dialect == "mistral":
        if len(values) != 1 or not isinstance(values[0], list) or not values[0]:
            return None
        values = values[0]
    if stripped[end:].strip() or not all(_bare_call(v, offered) for v in values):
        return None
    calls = [_named(v, n) for n, v in enumerate(values, 1)]
    return Markup(dialect, _text(head), _numbered(calls, step))


def _bare_call(value: object, offered: Collection[str]) -> bool:
    return (
        isinstance(value, dict)
        and value.keys() <= _BARE_KEYS
        and value.get("name") in offered
        and not value.keys().isdisjoint({"parameters", "arguments"})
    )


def _objects(text: str, pos: int) -> tuple[list[object], int]:
    """JSON values from `pos` on, separated by `;`, and where they end."""
    values: list[object] = []
    while True:
        value, pos = _decode(text, _skip_space(text, pos), len(values) + 1)
        values.append(value)
        after = _skip_space(text, pos)
        if not text.startswith(";", after):
            return values, pos
        pos = after + 1


def _json_call(body: str, n: int) -> Found:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise _Unreadable(f"tool call {n} is not JSON: {exc}") from None
    return _named(value, n)


def _xml_call(body: str, n: int) -> Found:
    m = _FUNCTION.match(body)
    if m is None:
        raise _Unreadable(f"tool call {n} has no name: {_excerpt(body)}")
    if m.group(3) is not None:
        raise _Unreadable(f"tool call {n} has no </function>: {_excerpt(body)}")
    arguments = {}
    for p in _PARAMETER.finditer(m.group(2)):
        if p.group(3) is not None:
            raise _Unreadable(f"tool call {n} has no </parameter> after <parameter={p[1]}>")
        arguments[p[1]] = _xml_value(p[2])
    return m.group(1), json.dumps(arguments, ensure_ascii=False)


def _xml_value(text: str) -> object:
    # Scalars stay text (the tools' validation reads "3" as 3 where a number is wanted, but
    # would refuse 3 where text is); a list or an object is what its JSON says.
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return value if isinstance(value, (list, dict)) else text


def _named(value: object, n: int) -> Found:
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(value, dict) or not isinstance(name, str):
        raise _Unreadable(f"tool call {n} is not an object with a name: {_excerpt(value)}")
    arguments = value["arguments"] if "arguments" in value else value.get("parameters", {})
    return name, _arguments(arguments)


def _arguments(value: object) -> str:
    # As the wire reader does: a string is the JSON text itself, anything else is encoded.
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _decode(text: str, pos: int, n: int) -> tuple[object, int]:
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except (ValueError, RecursionError) as exc:
        raise _Unreadable(f"tool call {n} is not JSON: {exc}") from None


def _top_level(text: str, token: str) -> int | None:
    """Where `token` first opens a line outside fenced code blocks."""
    fenced, offset = False, 0
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and stripped.startswith(token):
            return offset + len(line) - len(stripped)
        offset += len(line)
    return None


def _numbered(calls: list[Found], step: int) -> tuple[ToolCall, ...]:
    # Nine letters and digits while step < 1000: what Mistral's servers accept as an id.
    return tuple(
        ToolCall(f"call{step:03d}{n:02d}", name, args) for n, (name, args) in enumerate(calls)
    )


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _text(text: str) -> str | None:
    return text.strip() or None


def _excerpt(value: object) -> str:
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= EXCERPT else shown[:EXCERPT] + "..."

"""How big a YAML document may grow before claw refuses it, checked event by event as PyYAML
parses, so that nothing is ever built past the bounds.

A few hundred bytes of nested aliases ("billion laughs") expand to billions of values: PyYAML
builds them as shared references, but everything that walks the document afterwards (the key
lines, pydantic, the JSON cache) pays for every one. And PyYAML composes nested collections by
recursion, so a document nested some thousand levels deep is a RecursionError. Both are
counted here on the stream of parse events, alias expansions included, before either happens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import cast

import yaml

MAX_DEPTH = 50  # nesting levels; a task key is 3 deep, a JSON Schema a few more per level
MAX_VALUES = 100_000  # values in the document with every alias expanded
MAX_TEXT = 4_000_000  # characters of scalar text with every alias expanded

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class _Open:
    """A collection being parsed: what it holds so far."""

    anchor: str | None
    values: int = 1
    text: int = 0
    height: int = 1


@dataclass(frozen=True)
class _Closed:
    values: int
    text: int
    height: int


@dataclass
class Bounds:
    """Fed every parse event in order; raises a MarkedYAMLError at the first one past a bound."""

    values: int = 0
    text: int = 0
    stack: list[_Open] = field(default_factory=list)
    anchors: dict[str, _Closed] = field(default_factory=dict)

    def see(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.ScalarEvent):
            _refuse_surrogates(event)
            self._add(event, _Closed(1, len(event.value), 0), event.anchor)
        elif isinstance(event, yaml.AliasEvent):
            self._alias(event)
        elif isinstance(event, yaml.CollectionStartEvent):
            self.stack.append(_Open(event.anchor))
            self._count(event, 1, 0, 0)
        elif isinstance(event, yaml.CollectionEndEvent) and self.stack:
            done = self.stack.pop()
            closed = _Closed(done.values, done.text, done.height)
            self._record(done.anchor, closed)
            self._into_parent(closed)

    def _alias(self, event: yaml.AliasEvent) -> None:
        if any(frame.anchor == event.anchor for frame in self.stack):
            _refuse(event, f"the alias *{event.anchor} refers to a collection that holds it")
        found = self.anchors.get(str(event.anchor))
        if found is not None:  # an undefined alias is the composer's error to report
            self._count(event, found.values, found.text, found.height)
            self._into_parent(found)

    def _add(self, event: yaml.NodeEvent, value: _Closed, anchor: str | None) -> None:
        self._count(event, value.values, value.text, value.height)
        self._record(anchor, value)
        self._into_parent(value)

    def _count(self, event: yaml.Event, values: int, text: int, height: int) -> None:
        self.values += values
        self.text += text
        if len(self.stack) + height > MAX_DEPTH:
            _refuse(event, f"nested more than {MAX_DEPTH} levels deep; a clawfile needs a few")
        if self.values > MAX_VALUES:
            _refuse(event, _expanded(f"more than {MAX_VALUES:,} values"))
        if self.text > MAX_TEXT:
            _refuse(event, _expanded(f"more than {MAX_TEXT:,} characters of text"))

    def _record(self, anchor: str | None, value: _Closed) -> None:
        if anchor is not None:
            self.anchors[anchor] = value

    def _into_parent(self, value: _Closed) -> None:
        if self.stack:
            parent = self.stack[-1]
            parent.values += value.values
            parent.text += value.text
            parent.height = max(parent.height, value.height + 1)


def _expanded(what: str) -> str:
    return (
        f"the document holds {what} once its aliases are expanded; "
        "write the values out instead of nesting aliases (&name / *name)"
    )


def _refuse_surrogates(event: yaml.ScalarEvent) -> None:
    found = _SURROGATE.search(event.value)
    if found:
        code = f"\\u{ord(found.group()):04x}"
        _refuse(event, f"{code} is half of a surrogate pair, not a character; remove it")


def _refuse(event: yaml.Event, problem: str) -> None:
    mark = cast("yaml.Mark | None", event.start_mark)  # the pure-Python parser's own Mark
    raise yaml.MarkedYAMLError(problem=problem, problem_mark=mark)

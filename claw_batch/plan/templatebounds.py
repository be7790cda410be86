"""What one render of a template may spend, so that no template can hang a run or take the
host's memory (the sandboxed environment that calls these checks is `templatesandbox`):

- steps: each loop iteration, call, filter and intercepted operator is one (a macro call
  MACRO_STEPS); MAX_STEPS;
- size: no value it makes may exceed MAX_SIZE characters or items, nor a number MAX_INT_BITS,
  checked on every result and *before* the operations that multiply (`'x' * n`, `n ** m`,
  paddings, format widths); and nothing is printed, joined or formatted whose `extent` (a
  list with what it holds, a shared item each time it appears) exceeds MAX_SIZE;
- what it makes in all, its output included (a loop body's own text per iteration): MAX_BUILT
  characters; and calls (macros, caller(), loop()) nest at most MAX_CALL_DEPTH deep;
- and, a backstop for what steps do not weigh, MAX_SECONDS of wall time.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import string
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2.exceptions import SecurityError

MAX_STEPS = 250_000  # a template of real use takes a few thousand
MAX_SIZE = 4_000_000  # a prompt of 4 million characters is more than any model reads
MAX_INT_BITS = 16_384  # about 4,900 digits: more than Python will print
MAX_BUILT = 32_000_000  # characters made by one render: read(), joins, prints...
# A backstop for what steps do not weigh (one filter over a long text can take seconds): a
# render stops at its first step after this many seconds.
MAX_SECONDS = 10.0
MAX_CALL_DEPTH = 32
MACRO_STEPS = 10  # a macro call costs Jinja about ten times a loop iteration

_SURROGATE = re.compile("[\ud800-\udfff]")
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


class TemplateLimit(SecurityError):
    """A template went past a bound, or made what no prompt or path can carry."""


@dataclass
class _Meter:
    deadline: float
    steps: int = 0
    built: int = 0
    depth: int = 0


_meter: contextvars.ContextVar[_Meter | None] = contextvars.ContextVar("template_meter")


@contextlib.contextmanager
def metered() -> Iterator[None]:
    """Count what the renders inside spend. (Outside, as when Jinja folds constants while
    compiling, only sizes are checked: the template's own text bounds the rest.)"""
    token = _meter.set(_Meter(time.monotonic() + MAX_SECONDS))
    try:
        yield
    finally:
        _meter.reset(token)


def step(weight: int = 1) -> None:
    meter = _meter.get(None)
    if meter is not None:
        meter.steps += weight
        if meter.steps > MAX_STEPS:
            raise TemplateLimit(
                f"the template stopped after {MAX_STEPS:,} steps (loop iterations, calls, "
                "filters, operators): templates are bounded so that none can hang a run"
            )
        if time.monotonic() > meter.deadline:
            raise TemplateLimit(
                f"the template stopped after {MAX_SECONDS:g} seconds: templates are bounded "
                "so that none can hang a run"
            )


@contextlib.contextmanager
def nested() -> Iterator[None]:
    """One call deeper: a macro that calls itself stops here, not at Python's RecursionError."""
    meter = _meter.get(None)
    if meter is None:
        yield
        return
    if meter.depth >= MAX_CALL_DEPTH:
        raise TemplateLimit(
            f"calls nested more than {MAX_CALL_DEPTH} deep (a macro that calls itself?)"
        )
    meter.depth += 1
    try:
        yield
    finally:
        meter.depth -= 1


def charge(size: int) -> None:
    tick(0, size)


def tick(steps: int, size: int) -> None:
    """Count steps and characters made at once: what a loop iteration and a print cost."""
    meter = _meter.get(None)
    if meter is not None:
        meter.built += size
        if meter.built > MAX_BUILT:
            raise TemplateLimit(f"the template makes more than {MAX_BUILT:,} characters in all")
        if steps:
            step(steps)


def check_size(size: int) -> None:
    if size > MAX_SIZE:
        raise TemplateLimit(
            f"the template makes a value of more than {MAX_SIZE:,} characters or items, "
            "the most a template may"
        )


def check_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateLimit(
            f"the template makes a number of more than {MAX_INT_BITS:,} bits, the most "
            "a template may"
        )


def built(value: Any) -> Any:
    """Check and count a value the template has just made; return it. (Only its own length:
    what it holds was counted when that was made, and `extent` weighs the whole before it
    is printed.)"""
    if is_int(value):
        check_bits(value.bit_length())
    elif isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        check_size(len(value))
        charge(len(value))
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def extent(value: Any) -> int:
    """Characters of a string; for any other collection its items and what they hold, a
    shared one counted each time it appears (as printing it would show it), and never past
    MAX_SIZE + 1 (nor walked further)."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if type(value) in _SCALARS or not _is_container(value):  # the type test first: it is fast
        return 0
    sizes: dict[int, tuple[Any, int]] = {}  # id -> (the object, kept alive; its extent)
    stack: list[tuple[Any, bool]] = [(value, False)]
    entered: set[int] = set()
    while stack:
        node, ready = stack.pop()
        children = _children(node)
        kinds = set(map(type, children))  # at C speed: most collections hold no collection
        if ready or kinds <= _SCALARS or kinds <= _TEXTS:
            sizes[id(node)] = (node, _total(node, children, kinds, sizes))
        elif id(node) not in entered:
            entered.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if _is_container(c))
    return sizes[id(value)][1]


_SCALARS = frozenset({int, float, bool, type(None)})
_TEXTS = frozenset({str, bytes})


def _is_container(value: Any) -> bool:
    return isinstance(value, Collection) and not isinstance(value, (str, bytes))


def _children(node: Any) -> Collection[Any]:
    mapping = getattr(node, "mapping", node)  # a dict's keys(), values() or items()
    if isinstance(mapping, Mapping):
        return [*mapping.keys(), *mapping.values()]
    return node if isinstance(node, (list, tuple)) else list(node)


def _total(
    node: Any, children: Collection[Any], kinds: set[type], sizes: dict[int, tuple[Any, int]]
) -> int:
    if kinds <= _SCALARS:
        return len(node)
    if kinds <= _TEXTS:
        return min(len(node) + sum(map(len, children)), MAX_SIZE + 1)
    total = len(node)
    for child in children:
        if isinstance(child, (str, bytes)):
            total += len(child)
        elif id(child) in sizes:
            total += sizes[id(child)][1]
        if total > MAX_SIZE:
            return MAX_SIZE + 1
    return total


def check_printf(text: str) -> None:
    """`'%999999999d' % 1`: widths and precisions of printf-style formats."""
    for match in _PRINTF.finditer(text):
        for number in match.groups():
            _check_width(number)


def check_format(text: str) -> None:
    """`'{:>999999999}'.format(x)`: the widths of str.format, and no nested fields."""
    with contextlib.suppress(ValueError):  # a malformed format: the call itself says so
        for _, _, spec, _ in string.Formatter().parse(text):
            if spec and "{" in spec:
                raise TemplateLimit("a template may not nest a field in a format spec ({:{}})")
            for number in re.findall(r"\d+", spec or ""):
                _check_width(number)


def _check_width(number: str | None) -> None:
    if number == "*":
        raise TemplateLimit("a template may not take a format's width or precision from '*'")
    if number is not None and (len(number) > 7 or int(number) > MAX_SIZE):
        raise TemplateLimit(
            f"a width or precision of {number} in a format, more than the {MAX_SIZE:,} "
            "a template may make"
        )


def check_output(text: str) -> None:
    """What a render made: no longer than a value may be, and only characters (half of a
    surrogate pair can be neither a file name nor a request)."""
    check_size(len(text))
    found = _SURROGATE.search(text)
    if found:
        raise TemplateLimit(
            f"the template makes \\u{ord(found.group()):04x}, half of a surrogate pair, "
            "which is not a character"
        )

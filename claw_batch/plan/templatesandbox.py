"""The Jinja environment templates run in: templates are data, not code (SPEC §8).

Jinja's immutable sandbox refuses what would reach Python: attributes that start with '_',
unsafe callables, methods that change a list or dict. Every place where a template spends time
or memory (a loop iteration, a call, a filter, `*` `**` `%` `+` `~`, what `{{ }}` prints) is
checked against `templatebounds`; `{% include %}` runs only the project's own templates.
"""

from __future__ import annotations

import contextvars
import functools
import types
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sized
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.filters import make_attrgetter
from jinja2.sandbox import ImmutableSandboxedEnvironment

from claw_batch.plan import templatebounds as bounds
from claw_batch.safety.untrusted import fence

LOOP_FILTER = "claw_loop"  # what every `{% for %}` iterates through (see _Generator)
MAX_TEMPLATE_BYTES = 1_000_000  # an included template


class _Generator(CodeGenerator):
    """Jinja's code generator, with every loop iterating through LOOP_FILTER and every `~`
    through `environment.checked_join`: what a template repeats or grows without a call."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        for loop in list(node.find_all(nodes.For)):
            weight = sum(_text(n) for part in loop.body for n in part.find_all(nodes.Literal))
            wrapped = nodes.Filter(loop.iter, LOOP_FILTER, [nodes.Const(weight)], [], None, None)
            loop.iter = wrapped.set_lineno(loop.lineno).set_environment(self.environment)
        super().visit_Template(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.checked_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _text(node: nodes.Node) -> int:
    if isinstance(node, nodes.TemplateData):
        return len(node.data)
    value = getattr(node, "value", None)
    return len(value) if isinstance(value, str) else 0


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, bounded."""

    code_generator_class = _Generator
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        del self.globals["lipsum"]  # lipsum(10**9): text no prompt needs
        self.filters["sum"] = _sum
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.filters[LOOP_FILTER] = _loop
        shown = self.finalize or str

        def finalize(value: Any) -> str:  # what `{{ ... }}` prints (on every print: lean)
            if value.__class__ is str:
                text: str = value
            else:
                if not isinstance(value, str):  # a list printed whole: weighed before it is
                    bounds.check_size(bounds.extent(value))
                text = str(shown(value))
            bounds.check_size(len(text))
            bounds.tick(0, len(text))
            return text

        self.finalize = finalize

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        bounds.step()
        _before_binop(operator, left, right)
        return bounds.built(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        bounds.step(bounds.MACRO_STEPS if isinstance(__obj, jinja2.runtime.Macro) else 1)
        _before_call(__obj, args, kwargs)
        with bounds.nested():
            return bounds.built(super().call(__context, __obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        bounds.check_format(value.__self__)

        @functools.wraps(wrapped)
        def format_checked(*args: Any, **kwargs: Any) -> str:
            bounds.check_size(sum(bounds.extent(a) for a in (*args, *kwargs.values())))
            return wrapped(*args, **kwargs)

        return format_checked

    def checked_join(self, parts: Iterable[Any]) -> str:
        """`a ~ b`, its size checked before the text is made."""
        texts = []
        for part in parts:
            if not isinstance(part, str):
                bounds.check_size(bounds.extent(part))  # a list: weighed before it is printed
            texts.append(str(part))
        size = sum(map(len, texts))
        bounds.check_size(size)
        bounds.charge(size)
        return "".join(texts)


def _before_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse what would make a value past the bounds, before it is made."""
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and bounds.is_int(times):
                bounds.check_size(bounds.extent(seq) * max(times, 0))
        if bounds.is_int(left) and bounds.is_int(right):
            bounds.check_bits(left.bit_length() + right.bit_length())
    elif operator == "**" and bounds.is_int(left) and bounds.is_int(right):
        if abs(left) > 1 and right > 0:
            bounds.check_bits(left.bit_length() * right)
    elif operator == "%" and isinstance(left, str):
        bounds.check_printf(left)
        bounds.check_size(len(left) + bounds.extent(right))


def _before_call(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A method of str, bytes, int...: its numbers and what it joins or replaces."""
    if not isinstance(obj, types.BuiltinMethodType):
        return
    for value in (*args, *kwargs.values()):
        if bounds.is_int(value):
            bounds.check_size(abs(value))  # 'x'.ljust(10**10), (1).to_bytes(10**10, 'big')
        bounds.check_size(bounds.extent(value))
    owner, name = obj.__self__, obj.__name__
    if isinstance(owner, str) and name == "replace" and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        times = len(owner) + 1 if not old else owner.count(old)
        bounds.check_size(len(owner) + times * len(new))
    elif isinstance(owner, str) and name == "expandtabs" and args and bounds.is_int(args[0]):
        bounds.check_size(len(owner) * max(args[0], 1))
    elif isinstance(owner, str) and name == "join" and args and isinstance(args[0], Sized):
        bounds.check_size(bounds.extent(args[0]) + len(owner) * len(args[0]))


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A filter, its input and numbers checked first, its result after."""

    def bounded(*args: Any, **kwargs: Any) -> Any:
        bounds.step()
        values = (*args, *kwargs.values())
        if name not in _STRUCTURAL:  # it prints its input: weigh it first
            size = sum(bounds.extent(v) for v in values)
            bounds.check_size(size)
            bounds.charge(size)
        if name in _NUMBERS:
            widest = max((abs(v) for v in values if bounds.is_int(v)), default=0)
            text = next((v for v in values if isinstance(v, str)), "")
            bounds.check_size(_NUMBERS[name](widest, text, values))
        elif name == "format" and args and isinstance(args[0], str):
            bounds.check_printf(args[0])
        return bounds.built(function(*args, **kwargs))

    # Keeps jinja_pass_arg: whether the filter is given the context, the environment...
    return functools.update_wrapper(bounded, function)


# Filters that do not print their input (the others are weighed with `extent` first).
_STRUCTURAL = frozenset(
    "abs attr batch count d default dictsort filesizeformat first float groupby int items "  # noqa: SIM905
    "last length list map max min random reject rejectattr reverse round select selectattr "
    "slice sort sum unique".split()
)
_WRAP_COST = 40  # textwrap works about as hard for each line it makes as for 40 characters
# For the filters whose numbers (a width, a count, an indent) say how much they make: the
# most they can make from the largest number n, the text and all the values they are given.
_NUMBERS: dict[str, Callable[[int, str, tuple[Any, ...]], int]] = {
    "center": lambda n, text, values: n,
    "indent": lambda n, text, values: n * (text.count("\n") + 1),
    "wordwrap": lambda n, text, values: len(text) // max(n, 1) * _WRAP_COST,
    "truncate": lambda n, text, values: 0,  # only ever shortens
    "batch": lambda n, text, values: n,
    "slice": lambda n, text, values: n,
    "tojson": lambda n, text, values: n * sum(bounds.extent(v) for v in values),
}


@jinja2.pass_environment
def _sum(
    environment: jinja2.Environment, iterable: Iterable[Any], attribute: Any = None, start: Any = 0
) -> Any:
    """Jinja's sum, one counted addition at a time: `lists|sum(start=[])` copies all it has
    summed so far at each one."""
    if attribute is not None:
        iterable = map(make_attrgetter(environment, attribute), iterable)
    total = start
    for item in iterable:
        bounds.step()
        sizes = [len(v) for v in (total, item) if isinstance(v, (str, bytes, list, tuple))]
        bounds.check_size(sum(sizes))
        total = bounds.built(total + item)
    return total


@jinja2.pass_context  # never folded into a constant at compile time: it must run each time
def _loop(context: Any, iterable: Iterable[Any], weight: int) -> Iterator[Any]:
    """What a `{% for %}` iterates: a step per iteration, and the text its body writes."""
    for item in iterable:
        bounds.tick(1, weight)
        yield item


def refusal(error: SecurityError) -> str:
    """A sandbox refusal, saying why templates refuse it."""
    if isinstance(error, bounds.TemplateLimit):
        return str(error)
    return (
        f"{str(error).rstrip('.')}: templates run in Jinja's sandbox, which refuses "
        "attributes that start with '_' and methods that change a list or a dict"
    )


@dataclass(frozen=True)
class Reading:
    """What one render knows of outside content, for the loader: which project files are
    (`outside`: watched, tainted, staged) and whom to tell when one is shown (`saw`)."""

    outside: Callable[[str], bool]
    saw: Callable[[str], None] | None = None


_reading: contextvars.ContextVar[Reading | None] = contextvars.ContextVar("reading", default=None)


@contextmanager
def reading(outside: Callable[[str], bool], saw: Callable[[str], None] | None) -> Iterator[None]:
    """Around a render: the loader asks `outside` of every file a template loads."""
    token = _reading.set(Reading(outside, saw))
    try:
        yield
    finally:
        _reading.reset(token)


class ProjectLoader(jinja2.BaseLoader):
    """What `{% include %}`, `{% import %}` and `{% extends %}` may load: the project's own
    files, confined as read() is (symlinks resolved, never out of the project nor in .claw/).
    A file that is outside content (watched, written by a tainted job, a staged copy) is
    never run as a template: it is shown as read() shows it, fenced, and taints the job.

    Which files are outside content can change while a loaded template is cached (a tainted
    job writes one, the ledger is another run's): each use asks again (`uptodate`)."""

    def __init__(self, root: Path, untrusted: tuple[str, ...]) -> None:
        self.root, self.untrusted = root, untrusted

    def _outside(self, shown: str) -> bool:
        now = _reading.get()
        if now is not None:
            return now.outside(shown)
        from claw_batch.safety.paths import Policy

        return Policy(self.root, untrusted=self.untrusted).is_untrusted(shown)

    def load(
        self,
        environment: jinja2.Environment,
        name: str,
        globals: MutableMapping[str, Any] | None = None,
    ) -> jinja2.Template:
        real, shown = self._resolve(name)
        stamp, globals = _stamp(real), globals or {}
        if not self._outside(shown):
            source = self._read(real, shown).decode("utf-8")
            code = environment.compile(source, name, str(real))
            fresh = lambda: _stamp(real) == stamp and not self._outside(shown)  # noqa: E731
            return environment.template_class.from_code(environment, code, globals, fresh)
        # Loaded again for each use (never up to date): each job that renders it is tainted,
        # an `{% import %}`'s module included (Jinja keeps one per template).
        text = fence(self._read(real, shown).decode("utf-8", errors="replace"), shown)
        code = environment.compile("", name, str(real))
        template = environment.template_class.from_code(environment, code, globals, _never)
        template.root_render_func = functools.partial(_fenced, shown, text)
        return template

    def _resolve(self, template: str) -> tuple[Path, str]:
        from claw_batch.safety.paths import Policy

        policy = Policy(self.root)
        real = policy.resolve_read(template)
        return real, policy.relative(real)

    def _read(self, real: Path, shown: str) -> bytes:
        from claw_batch.errors import ToolError
        from claw_batch.safety.safeopen import read_file

        data = read_file(real, shown, MAX_TEMPLATE_BYTES)
        if len(data) > MAX_TEMPLATE_BYTES:
            raise ToolError(f"{shown} is larger than {MAX_TEMPLATE_BYTES:,} bytes")
        return data


def _never() -> bool:
    return False


def _fenced(shown: str, text: str, context: Any) -> Iterator[str]:
    """What an included outside file renders as: its text fenced, never run; the job that
    renders it (not the one that first loaded it) is tainted."""
    now = _reading.get()
    if now is not None and now.saw is not None:
        now.saw(shown)
    bounds.tick(0, len(text))
    yield text


def _stamp(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None

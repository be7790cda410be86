"""What can be known of a template without rendering it (`claw validate`): its syntax, the
variables it reads, what the sandbox would refuse where the template names it, and what only
compiling finds (an unknown filter...). It is parsed and compiled by the environment that
renders it (`templatesandbox`), so that what passes here renders the same way."""

from __future__ import annotations

import functools
import re
import string
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from jinja2 import meta, nodes

from claw_batch.config import prompt_file

if TYPE_CHECKING:
    from claw_batch.config import Task

ITEM = "template variable 'item' is only defined for tasks with foreach or watch"
# What a sub-job's parent gave it (`delegate(task=..., input={...})`); {} for a job run
# directly, so every task may read it.
INPUT = "input"


def template_errors(text: str, *, foreach: bool) -> list[tuple[int, str]]:
    """(line, message) for a syntax error, each unknown variable and each attribute the sandbox
    refuses, of a Jinja2 template, compiled as rendering will compile it."""
    try:
        ast = _environment().parse(text)
        _environment().compile(text)  # what only compiling finds: an unknown filter...
    except jinja2.TemplateAssertionError as exc:
        return [(exc.lineno, f"template error: {exc.message}")]
    except jinja2.TemplateSyntaxError as exc:
        return [(exc.lineno, f"template syntax error: {exc.message}")]
    except RecursionError:
        return [(1, "the template is nested too deeply (brackets or blocks)")]
    return _variables(ast, foreach=foreach) + _refused(ast)


def _variables(ast: nodes.Template, *, foreach: bool) -> list[tuple[int, str]]:
    from claw_batch.plan.render import TEMPLATE_VARIABLES  # late: render may import this package

    known_names = TEMPLATE_VARIABLES | {INPUT}
    undeclared = meta.find_undeclared_variables(ast)
    first_use: dict[str, int] = {}
    for node in ast.find_all(nodes.Name):
        if node.name in undeclared and node.ctx == "load":
            first_use.setdefault(node.name, node.lineno)
    known = ", ".join(sorted(known_names))
    errors = []
    for name in sorted(undeclared, key=lambda name: (first_use.get(name, 1), name)):
        line = first_use.get(name, 1)
        if name not in known_names:
            errors.append((line, f"undefined template variable {name!r} (known: {known})"))
        elif name == "item" and not foreach:
            errors.append((line, ITEM))
    return errors


# What Jinja's immutable sandbox refuses at render time, found beforehand where the template
# names it: attributes that start with '_', and calls of methods that change a list, dict or set.
_CHANGING = frozenset(
    "append extend insert remove pop popitem clear sort reverse update setdefault add discard "  # noqa: SIM905
    "difference_update intersection_update symmetric_difference_update".split()
)


def _refused(ast: nodes.Template) -> list[tuple[int, str]]:
    found = [(n.lineno, n.attr) for n in ast.find_all(nodes.Getattr) if n.attr.startswith("_")]
    found += [
        (n.lineno, n.arg.value)
        for n in ast.find_all(nodes.Getitem)
        if isinstance(n.arg, nodes.Const) and str(n.arg.value).startswith("_")
    ]
    for call in ast.find_all(nodes.Call):
        if isinstance(call.node, nodes.Getattr) and call.node.attr in _CHANGING:
            found.append((call.lineno, call.node.attr))
        if isinstance(call.node, nodes.Getattr) and call.node.attr in ("format", "format_map"):
            found += [(call.lineno, name) for name in _format_fields(call.node.node)]
    return [
        (
            line,
            f"templates may not use {name!r}: they run in Jinja's sandbox, which refuses "
            "attributes that start with '_' and methods that change a list or a dict",
        )
        for line, name in sorted(set(found))
    ]


def _format_fields(node: nodes.Node) -> list[str]:
    """`'{0.__class__}'.format(x)`: the attributes a constant format string reads."""
    if not isinstance(node, nodes.Const) or not isinstance(node.value, str):
        return []
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(node.value) if f]
    except ValueError:  # not a valid format: rendering says so
        return []
    return [part for f in fields for part in re.split(r"[.\[\]]", f) if part.startswith("_")]


INCLUDES = "{% include %}"  # in task_variables: the templates include, import or extend others


def task_variables(task: Task, root: Path) -> frozenset[str]:
    """The template variables a valid task's prompt and output paths read."""
    file = prompt_file(task.prompt)
    prompt = (root / file).read_text(encoding="utf-8") if file else task.prompt
    names: set[str] = set()
    for text in (prompt, task.output or "", *task.outputs):
        ast = _environment().parse(text)
        names |= meta.find_undeclared_variables(ast)
        if any(True for _ in meta.find_referenced_templates(ast)):
            names.add(INCLUDES)  # what an included template reads is not known here
    return frozenset(names)


@functools.cache
def _environment() -> jinja2.Environment:
    """The environment templates render in, without a loader: it only parses and compiles."""
    from claw_batch.plan.templatesandbox import BoundedSandbox

    return BoundedSandbox(undefined=jinja2.StrictUndefined)

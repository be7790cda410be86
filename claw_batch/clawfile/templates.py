"""The clawfile's templates, checked statically (`templatecheck`): every variable they read
must be one that rendering provides (SPEC §3). A prompt written in the clawfile, or in a file
of its own, with the templates it includes; and the output paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from claw_batch.clawfile.fields import path_problem
from claw_batch.clawfile.yamlsource import Problem, YamlSource
from claw_batch.config import KeyPath, prompt_file
from claw_batch.errors import ToolError
from claw_batch.plan.templatecheck import ITEM, template_errors
from claw_batch.safety import control

if TYPE_CHECKING:
    from claw_batch.config import Task


def prompt(name: str, task: Task, source: YamlSource, root: Path) -> list[Problem]:
    path, foreach = ("tasks", name, "prompt"), task.fans_out
    if not task.prompt.strip():
        return [source.problem(path, "the prompt is empty")]
    file = prompt_file(task.prompt)
    if file is None:
        return inline(task.prompt, path, source, foreach) + _includes(
            source.name, task.prompt, root
        )
    outside = path_problem(file)
    if outside:
        return [source.problem(path, outside)]
    if not (root / file).is_file():
        return [source.problem(path, f"prompt file {file!r} not found")]
    try:
        text = (root / file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [source.problem(path, f"prompt file {file!r} cannot be read: {exc}")]
    # The file may serve several tasks: say which one lacks the foreach or watch.
    return [
        Problem(file, line, (), message + (f" (task {name!r} has none)" if message == ITEM else ""))
        for line, message in template_errors(text, foreach=foreach)
    ] + _includes(file, text, root)


def _includes(file: str, text: str, root: Path) -> list[Problem]:
    """Each template `text` includes by a literal name (and they in turn) must be a file that
    can be read as one: a missing one, a FIFO, one outside the project is said here."""
    problems: list[Problem] = []
    seen, todo = {file}, [(file, text)]
    while todo and len(seen) < 100:
        where, body = todo.pop()
        for name in control.included(body, required=True):
            if name in seen:
                continue
            seen.add(name)
            try:
                todo.append((name, control.read_template(root, name)))
            except (OSError, ToolError) as e:
                problems.append(Problem(where, None, (), f"included template {name!r}: {e}"))
    return problems


def inline(text: str, path: KeyPath, source: YamlSource, foreach: bool) -> list[Problem]:
    """Problems of a template written in the clawfile, at their line in the clawfile."""
    start = source.text_lines.get(path)
    return [
        Problem(source.name, start + line - 1 if start else source.line(path), path, message)
        for line, message in template_errors(text, foreach=foreach)
    ]

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from claw_batch.commands.common import handle_errors, load, project_options

if TYPE_CHECKING:
    from claw_batch.config import Clawfile
    from claw_batch.plan.graph import Graph
    from claw_batch.plan.taintflow import Source

Reach = dict[str, tuple["Source", ...]]  # per task that outside content can reach: how


@click.command()
@click.argument("targets", nargs=-1, metavar="[TASK]...")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["dot", "mermaid"]),
    default="dot",
    show_default=True,
    help="Graphviz dot, or a Mermaid flowchart.",
)
@project_options
@handle_errors
def graph(targets: tuple[str, ...], fmt: str, directory: Path | None, file: Path | None) -> int:
    """Print the task graph.

    Every task, or the TASKs (names or globs) and what they need. Arrows go from a task to
    the tasks that use its results; dashed ones are implicit (an input glob matches the
    task's output), labelled with that glob. Tasks that outside content can reach are red,
    and say from where ("tainted: ...").

    \b
    Examples:
      claw graph | dot -Tsvg > graph.svg
      claw graph --format mermaid digest
    """
    from claw_batch.plan import graph as task_graph
    from claw_batch.plan import taintflow
    from claw_batch.plan.jobs import select_tasks

    config = load(directory, file).config
    built = task_graph.build(config)
    names = built.order(select_tasks(config, targets)) if targets else list(built.tasks)
    render = to_dot if fmt == "dot" else to_mermaid
    click.echo(render(built, config, names, taintflow.reach(config, built)), nl=False)
    return 0


def to_dot(graph: Graph, config: Clawfile, names: list[str], reach: Reach) -> str:
    lines = ["digraph claw {", "  rankdir=LR;", "  node [shape=box];"]
    for name in _file_order(graph, names):
        notes = _notes(config, name, reach)
        attributes = [f"label={_dot(chr(10).join([name, *notes]))}"] if notes else []
        attributes += ["color=red"] if name in reach else []
        label = f" [{', '.join(attributes)}]" if attributes else ""
        lines.append(f"  {_dot(name)}{label};")
    for task, upstream in _edges(graph, names):
        via = graph.via(task, upstream)
        style = f" [style=dashed, label={_dot(via.glob)}]" if via else ""
        lines.append(f"  {_dot(upstream)} -> {_dot(task)}{style};")
    return "\n".join([*lines, "}"]) + "\n"


def to_mermaid(graph: Graph, config: Clawfile, names: list[str], reach: Reach) -> str:
    ids = {name: f"t{i}" for i, name in enumerate(graph.tasks)}  # task names may not be ids
    lines = ["flowchart LR"]
    for name in _file_order(graph, names):
        label = "<br/>".join(_mermaid(text) for text in [name, *_notes(config, name, reach)])
        lines.append(f'  {ids[name]}["{label}"]')
    for task, upstream in _edges(graph, names):
        via = graph.via(task, upstream)
        arrow = f'-.->|"{_mermaid(via.glob)}"|' if via else "-->"
        lines.append(f"  {ids[upstream]} {arrow} {ids[task]}")
    tainted = [ids[name] for name in _file_order(graph, names) if name in reach]
    if tainted:
        lines += [
            "  classDef tainted stroke:#c00,color:#c00",
            f"  class {','.join(tainted)} tainted",
        ]
    return "\n".join(lines) + "\n"


def _file_order(graph: Graph, names: list[str]) -> list[str]:
    return [name for name in graph.tasks if name in names]


def _edges(graph: Graph, names: list[str]) -> list[tuple[str, str]]:
    """(task, upstream) for each edge among `names`: by task in file order, then as declared."""
    return [
        (task, upstream)
        for task in _file_order(graph, names)
        for upstream in dict.fromkeys(graph.upstream(task))
        if upstream in names
    ]


def _notes(config: Clawfile, name: str, reach: Reach) -> list[str]:
    """What else there is to know about a task on a graph: fan-out, triggers, taint."""
    task = config.tasks[name]
    notes = [f"foreach {task.foreach}"] if task.foreach else []
    if task.schedule:
        notes.append(f"schedule {task.schedule}" + (f" ({task.tz})" if task.tz else ""))
    if task.watch:
        notes.append("watch " + " ".join(task.watch))
    if task.hook:
        notes.append(f"hook {task.hook}")
    if task.check:
        notes.append("check")
    if name in reach:
        notes.append("tainted: " + ", ".join(dict.fromkeys(s.short for s in reach[name])))
    return notes


def _dot(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _mermaid(text: str) -> str:
    """Mermaid's entity codes for what would end a label or start markup."""
    for char in '#&"<>|':
        text = text.replace(char, f"#{ord(char)};")  # '#' first: the codes start with one
    return text

"""`claw validate`'s checks of `delegate:`: the tasks it names exist and can be one job, the
task offers the tool, and no chain of delegations and `needs:` waits on itself."""

from __future__ import annotations

import difflib
import itertools
from collections import deque
from typing import TYPE_CHECKING

from claw_batch.clawfile.yamlsource import Problem, YamlSource
from claw_batch.config import KeyPath

if TYPE_CHECKING:
    from claw_batch.config import Clawfile, Task
    from claw_batch.plan.graph import Graph


def check(config: Clawfile, source: YamlSource, names: list[str]) -> list[Problem]:
    problems = _tool(config, source)
    for name, task in config.tasks.items():
        for index, target in enumerate(task.delegate.tasks):
            at = (*_where(source, name), "tasks", index)
            if target not in names:
                problems.append(source.problem(at, _unknown(target, names)))
            elif target in config.tasks:
                problems += _one_job(target, config.tasks[target], at, source)
    return problems + _cycles(config, source)


def _tool(config: Clawfile, source: YamlSource) -> list[Problem]:
    """`delegate:` says which tasks the tool may start: without the tool it does nothing."""
    found: dict[KeyPath, Problem] = {}  # a default's problem once, not once per task
    for name, task in config.tasks.items():
        if not task.delegate.tasks or _delegates(task):
            continue
        at = _where(source, name)
        if at[0] == "defaults" and any(
            _delegates(t) for n, t in config.tasks.items() if _inherits(source, n)
        ):
            continue  # some task that takes the default uses it
        message = (
            f"delegate: lists tasks this task may start as sub-jobs, but delegate is not "
            f"one of its tools: add delegate to tools ({', '.join(task.offered_tools)})"
        )
        found.setdefault(at, source.problem(at, message))
    return list(found.values())


def _one_job(name: str, task: Task, at: KeyPath, source: YamlSource) -> list[Problem]:
    """A sub-job is one job, started by its parent: not a fan-out, nor a trigger's."""
    how = [
        (bool(task.foreach), f"fans out (foreach: {task.foreach})"),
        (bool(task.watch), f"fans out (watch: {', '.join(task.watch)})"),
        (bool(task.schedule), f"runs on a schedule (schedule: {task.schedule})"),
        (bool(task.hook), f"runs from a git hook (hook: {task.hook})"),
        (task.batch, "runs through a provider's Batch API (batch: true), which takes hours"),
    ]
    return [
        source.problem(
            at,
            f"task {name!r} {said}: a sub-job is one job its parent waits for; delegate "
            "to a task of its own without foreach:, watch:, schedule:, hook: and batch:",
        )
        for wrong, said in how
        if wrong
    ][:1]


def _cycles(config: Clawfile, source: YamlSource) -> list[Problem]:
    """A job waits for its sub-jobs, and a task's jobs for those of the tasks it needs: a
    chain of these that comes back to where it started can never finish (a → b → a)."""
    from claw_batch.plan import graph as graphs

    graph, _ = graphs.analyse(config)
    seen: set[frozenset[str]] = set()
    problems = []
    for name, task in config.tasks.items():
        for index, target in enumerate(task.delegate.tasks):
            if target not in config.tasks or not _delegates(task):
                continue
            path = _path(config, graph, target, name)
            if path is None:
                continue
            cycle = [name, *path]
            if frozenset(cycle) in seen:
                continue
            seen.add(frozenset(cycle))
            at = (*_where(source, name), "tasks", index)
            problems.append(source.problem(at, _cycle_message(config, graph, cycle)))
    return problems


def _waits(config: Clawfile, graph: Graph, name: str) -> list[str]:
    """The tasks a job of `name` waits for: its sub-jobs', then its upstream's."""
    task = config.tasks[name]
    own = [t for t in task.delegate.tasks if t in config.tasks and _delegates(task)]
    return [*own, *graph.edges[name]]


def _path(config: Clawfile, graph: Graph, start: str, goal: str) -> list[str] | None:
    """The shortest chain of waits from `start` to `goal`, both included; None: none."""
    before: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        name = queue.popleft()
        if name == goal:
            path = [name]
            while (previous := before[path[-1]]) is not None:
                path.append(previous)
            return path[::-1]
        for upstream in _waits(config, graph, name):
            if upstream not in before:
                before[upstream] = name
                queue.append(upstream)
    return None


def _cycle_message(config: Clawfile, graph: Graph, cycle: list[str]) -> str:
    steps = list(itertools.pairwise(cycle))
    said = []
    for a, b in steps:
        if b in config.tasks[a].delegate.tasks:
            said.append(f"{a} delegates to {b}")
        else:
            via = graph.via(a, b)
            said.append(via.describe(a, b) if via else f"{a} needs {b}")
    chain = " → ".join(cycle)
    if all(b in config.tasks[a].delegate.tasks for a, b in steps):
        return (
            f"delegation cycle: {chain} ({'; '.join(said)}): each would start the other as a "
            "sub-job; remove one from delegate.tasks"
        )
    return (
        f"delegation cycle through needs: {chain} ({'; '.join(said)}): a sub-job would run "
        "before a task it depends on has finished; a task may delegate to the tasks it "
        "needs, not to those that need it"
    )


def _unknown(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(names)}"
    return f"unknown task {name!r} ({hint})"


def _inherits(source: YamlSource, task: str) -> bool:
    return "delegate" not in source.data["tasks"][task]


def _where(source: YamlSource, task: str) -> KeyPath:
    return ("defaults", "delegate") if _inherits(source, task) else ("tasks", task, "delegate")


def _delegates(task: Task) -> bool:
    """Whether its jobs may start sub-jobs (a `delegate:` without the tool is said above)."""
    return "delegate" in task.offered_tools

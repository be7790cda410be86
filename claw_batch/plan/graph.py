"""The task graph: explicit `needs:` plus implicit edges, and the order tasks run in (SPEC §2, §4).

Task B depends on task A when B `needs` A, or when one of B's `inputs` globs (or its
`foreach` glob) can match a file that A's `output` or `outputs` can name. Whether a glob can
match a file an output template names is decided exactly on the languages of both, as small
automata (`overlap.Nfa`) whose product is searched for a common path. An output template is read as:

- literal text as is (`*`, `?` and `[` in an output are ordinary characters; a leading `./`
  is dropped, and `{{-`/`-}}` trim whitespace as Jinja does);
- `{{ today }}` as a date, `YYYY-MM-DD`; `{{ task }}` as the task's name;
- an expression that reads a path (`item`, `item.path`, `item.dir`: `item` but for its
  `stem`, `name` or `suffix`; `input`, `needs`, `inputs`, `files`, `git`, `read`, `glob`) as
  any text, `/` included;
- any other expression (`{{ item.stem }}`, `{{ now }}`, `{{ today | upper }}`) as any text
  within one path segment, like a glob `*`;
- from the first `{% ... %}` statement to the end of the last tag, as anything at all;
  `{# ... #}` as nothing.

So the reading widens what an output can name, which may find an edge or a conflict that no
real run meets, and misses one only for a filter that puts a `/` into a one-segment expression
(`{{ item.stem | replace('-', '/') }}`). Two tasks whose outputs can name the same file are
refused, as is a cycle; a task whose inputs match its own output does not depend on itself.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from claw_batch.config import KeyPath, dotted
from claw_batch.errors import ClawfileError
from claw_batch.plan import overlap

if TYPE_CHECKING:
    from claw_batch.config import Clawfile


@dataclass(frozen=True)
class Via:
    """Why an implicit edge exists: the dependent's glob matches the upstream's output."""

    key: KeyPath  # where the glob is: ("inputs", 0) or ("foreach",)
    glob: str
    output_key: str  # "output" or "outputs"
    output: str  # the upstream's output template

    def describe(self, task: str, upstream: str) -> str:
        return (
            f"{task} needs {upstream} through {self.key[0]} {self.glob!r} "
            f"matching {self.output_key} {self.output!r}"
        )


@dataclass(frozen=True)
class GraphProblem:
    at: KeyPath  # e.g. ("tasks", "a", "needs"), ("tasks", "b", "outputs", 1)
    message: str

    def __str__(self) -> str:
        return f"{dotted(self.at)}: {self.message}"


@dataclass(frozen=True)
class Graph:
    tasks: tuple[str, ...]  # file order
    edges: Mapping[str, tuple[str, ...]]  # task -> the tasks it depends on, directly
    implicit: Mapping[tuple[str, str], Via] = field(default_factory=dict)  # (task, upstream)

    def upstream(self, task: str) -> tuple[str, ...]:
        """The tasks `task` depends on directly: its `needs`, then implicit ones in file order."""
        return self.edges[task]

    def dependents(self, task: str) -> tuple[str, ...]:
        """The tasks that depend on `task` directly, in file order."""
        return self._dependents.get(task, ())

    def via(self, task: str, upstream: str) -> Via | None:
        """Why `task` depends on `upstream` when only an implicit edge says so, else None."""
        return self.implicit.get((task, upstream))

    def order(self, names: Iterable[str]) -> list[str]:
        """`names` and everything they depend on, transitively, each after its dependencies;
        among tasks that could run in either order, the one written first in the file first."""
        wanted: set[str] = set()
        stack = list(names)
        while stack:
            name = stack.pop()
            if name not in wanted:
                wanted.add(name)
                stack.extend(self.edges[name])
        index = {task: i for i, task in enumerate(self.tasks)}
        waiting = {task: len(set(self.edges[task])) for task in wanted}
        ready = [index[task] for task in wanted if not waiting[task]]
        heapq.heapify(ready)
        ordered: list[str] = []
        while ready:
            task = self.tasks[heapq.heappop(ready)]
            ordered.append(task)
            for dependent in self.dependents(task):
                if dependent in waiting:
                    waiting[dependent] -= 1
                    if not waiting[dependent]:
                        heapq.heappush(ready, index[dependent])
        return ordered

    @functools.cached_property
    def _dependents(self) -> dict[str, tuple[str, ...]]:
        found: dict[str, list[str]] = {}
        for task in self.tasks:
            for upstream in dict.fromkeys(self.edges[task]):
                found.setdefault(upstream, []).append(task)
        return {task: tuple(dependents) for task, dependents in found.items()}


def build(config: Clawfile) -> Graph:
    """The graph of a clawfile, or ClawfileError on a cycle or on two producers of a file."""
    graph, problems = analyse(config)
    if problems:
        raise ClawfileError("\n".join(str(problem) for problem in problems))
    return graph


def analyse(config: Clawfile) -> tuple[Graph, list[GraphProblem]]:
    """The graph, and what is wrong with it: the first cycle (walking the tasks in file order),
    then every pair of tasks whose outputs can name the same file. Unknown `needs` are left
    out (claw_batch.clawfile.checks reports them)."""
    reads, writes = _paths(config)
    edges: dict[str, tuple[str, ...]] = {}
    implicit: dict[tuple[str, str], Via] = {}
    for name, task in config.tasks.items():
        upstream = [need for need in task.needs if need in config.tasks]
        for other in config.tasks:
            if other == name or other in upstream:
                continue
            match = next(
                (
                    (r, w)
                    for w in writes[other]
                    for r in reads[name]
                    if overlap.intersect(r.nfa, w.nfa)
                ),
                None,
            )
            if match is not None:
                upstream.append(other)
                read, write = match
                implicit[(name, other)] = Via(read.key, read.text, str(write.key[0]), write.text)
        edges[name] = tuple(upstream)
    graph = Graph(tuple(config.tasks), edges, implicit)
    return graph, [*_cycle(graph), *_producers(writes)]


def can_match(glob: str, output: str, *, task: str = "") -> bool:
    """Whether `glob` can match a file that the output template of `task` can name."""
    return overlap.intersect(overlap.reads(glob), overlap.writes(output, task))


@dataclass(frozen=True)
class _Path:
    """A glob a task reads, or an output template it writes, with where it is written."""

    task: str
    key: KeyPath  # ("inputs", 0), ("foreach",), ("output",), ("outputs", 0)...
    text: str
    nfa: overlap.Nfa


def _paths(config: Clawfile) -> tuple[dict[str, list[_Path]], dict[str, list[_Path]]]:
    """Per task, what it reads (inputs, foreach, watch) and what it writes (output, outputs)."""
    reads, writes = {}, {}
    for name, task in config.tasks.items():
        globs: list[tuple[KeyPath, str]] = [(("inputs", i), g) for i, g in enumerate(task.inputs)]
        globs += [(("foreach",), task.foreach)] if task.foreach is not None else []
        globs += [(("watch", i), g) for i, g in enumerate(task.watch)]
        reads[name] = [_Path(name, key, g, overlap.reads(g)) for key, g in globs]
        outputs: list[tuple[KeyPath, str]] = [(("output",), task.output)] if task.output else []
        outputs += [(("outputs", i), output) for i, output in enumerate(task.outputs)]
        writes[name] = [_Path(name, k, o, overlap.writes(o, name)) for k, o in outputs]
    return reads, writes


def _cycle(graph: Graph) -> list[GraphProblem]:
    done: set[str] = set()
    for name in graph.tasks:
        cycle = _find_cycle(graph, name, [], done)
        if cycle:
            return [_cycle_problem(graph, cycle)]
    return []


def _find_cycle(graph: Graph, name: str, stack: list[str], done: set[str]) -> list[str]:
    if name in stack:
        return [*stack[stack.index(name) :], name]
    if name in done:
        return []
    stack.append(name)
    for upstream in graph.edges[name]:
        cycle = _find_cycle(graph, upstream, stack, done)
        if cycle:
            return cycle
    stack.pop()
    done.add(name)
    return []


def _cycle_problem(graph: Graph, cycle: list[str]) -> GraphProblem:
    steps = list(itertools.pairwise(cycle))
    reasons = [via.describe(a, b) for a, b in steps if (via := graph.via(a, b)) is not None]
    message = "dependency cycle: " + " -> ".join(cycle)
    if reasons:
        message += f" ({'; '.join(reasons)})"
    first = graph.via(*steps[0])
    return GraphProblem(("tasks", cycle[0], *(first.key if first else ("needs",))), message)


def _producers(writes: dict[str, list[_Path]]) -> list[GraphProblem]:
    """Each output that can name a file an output of a task written before can name."""
    problems: list[GraphProblem] = []
    before: list[_Path] = []
    for paths in writes.values():
        for path in paths:
            clash = next(
                (other for other in before if overlap.intersect(other.nfa, path.nfa)), None
            )
            if clash is not None:
                at = ("tasks", path.task, *path.key)
                problems.append(GraphProblem(at, _both_produce(clash, path)))
        before += paths
    return problems


def _both_produce(a: _Path, b: _Path) -> str:
    head = f"tasks {a.task!r} and {b.task!r} both produce"
    if a.text == b.text:
        return f"{head} {a.text!r}"
    static = [p for p in (a, b) if not overlap.TEMPLATE_CODE.search(p.text)]
    if len(static) == 1:
        templated = a if static[0] is b else b
        return f"{head} {static[0].text!r} ({templated.task}'s {templated.text!r} can name it)"
    return f"{head} {a.text!r} and {b.text!r}, which can name the same file"

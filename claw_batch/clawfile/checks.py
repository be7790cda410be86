"""The clawfile checks that pydantic cannot make field by field: references between tasks,
dependency cycles, skills, providers' endpoints, limits in USD, grants, what claw watch would
see again, control files, and the templates (claw_batch.clawfile.templates)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING

from claw_batch.clawfile import delegatechecks, mcpchecks, notifychecks, templates
from claw_batch.clawfile.yamlsource import Problem, YamlSource
from claw_batch.config import KeyPath, Project, provider_keys
from claw_batch.mcp import names
from claw_batch.safety import control

if TYPE_CHECKING:
    from claw_batch.config import Clawfile, Task

_NO_BASE_URL = (
    "missing required key 'base_url': the URL of this provider's OpenAI-compatible API, "
    "e.g. base_url: http://localhost:11434/v1 (only a provider named 'openai' may leave it out, "
    "to use OPENAI_BASE_URL or api.openai.com)"
)
USD_LIMITS = ("max_usd", "per_day", "per_week")


def check(config: Clawfile, source: YamlSource, root: Path, *, names: list[str]) -> list[Problem]:
    """Problems of a clawfile whose tasks passed validation; `names` lists every task the
    file declares, valid or not, so that a broken task is not also reported as unknown."""
    problems = _references(config, source, names)
    problems += _graph(config, source)
    problems += _skills(config, source, root)
    problems += _providers(config, source)
    problems += _usd_limits(config, source)
    problems += _passed_keys(config, source)
    problems += mcpchecks.check(config, source)
    problems += notifychecks.check(source)
    problems += delegatechecks.check(config, source, names)
    for name, task in config.tasks.items():
        problems += _bash(name, task, source)
        problems += _grants(name, task, source)
        problems += _task(name, task, source, root)
    return problems


def control_warnings(project: Project, source: YamlSource) -> list[Problem]:
    """Each task that names a control file explicitly, and so may rewrite what decides what
    later runs do (or names one no task may write: that grants nothing)."""
    from claw_batch.plan import overlap

    ctl = control.of(project)
    found: dict[KeyPath, Problem] = {}
    for name, task in project.config.tasks.items():
        named = control.granted(task)
        places: list[tuple[KeyPath, str]] = [
            ((*_where(source, name, "permissions"), "write", i), w)
            for i, w in enumerate(task.permissions.write)
        ]
        places += [(_where(source, name, "output"), task.output or "")]
        places += [((*_where(source, name, "outputs"), i), o) for i, o in enumerate(task.outputs)]
        for at, path in places:
            reads = at[-2] == "write"  # a write glob; else an output template
            nfa = overlap.reads(path) if reads else overlap.writes(path, name)
            code = mcpchecks.code_warning(path, nfa, ctl.code, project.root) if path else None
            if path and code is None:
                kind = "the notify command of task"
                code = mcpchecks.code_warning(path, nfa, ctl.notify, project.root, kind)
            if code is not None:
                found.setdefault(at, source.problem(at, code))
                continue
            folder = path.endswith("/") or (project.root / path).is_dir()
            literal = control.clean(path) in named or folder
            hit = ctl.named(path) if path and literal else None
            if hit is not None:
                warning = _control_warning(path, hit, ctl, folder=folder)
                found.setdefault(at, source.problem(at, warning))
    return list(found.values())


def _control_warning(path: str, hit: str, ctl: control.Control, *, folder: bool) -> str:
    if folder and hit not in ctl.never:
        return (
            f"warning: {path!r} is a folder of files that decide what later runs do: naming "
            "it grants nothing; name each file a job may write"
        )
    if hit in ctl.never:
        return f"warning: {path!r} is under {hit}/, which no job may ever write: it grants nothing"
    what = repr(path) if control.clean(path) == hit else f"{path!r} is under {hit!r}, which"
    return (
        f"warning: {what} decides what later runs do; named here, it can be rewritten by "
        "the jobs of this task, and so by whatever content they read"
    )


def _references(config: Clawfile, source: YamlSource, names: list[str]) -> list[Problem]:
    problems = [
        source.problem(("default", index), _unknown_task(name, names))
        for index, name in enumerate(config.default or [])
        if name not in names
    ]
    for task_name, task in config.tasks.items():
        at = _where(source, task_name, "needs")
        problems += [
            source.problem((*at, index), _unknown_task(need, names))
            for index, need in enumerate(task.needs)
            if need not in names
        ]
    return problems


def _skills(config: Clawfile, source: YamlSource, root: Path) -> list[Problem]:
    """Every skill a task asks for must be one that discovery finds."""
    if not any(task.skills for task in config.tasks.values()):
        return []
    from claw_batch.skills import skill as skills

    found = [s.name for s in skills.discover(skills.skill_dirs(root, config.workspace))]
    problems = []
    for task_name, task in config.tasks.items():
        at = _where(source, task_name, "skills")
        for index, name in enumerate(task.skills or []):
            if name not in found:
                close = difflib.get_close_matches(name, found, n=1)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else f"found: {', '.join(found)}"
                    if found
                    else "no skills found"
                )
                problems.append(source.problem((*at, index), f"unknown skill {name!r} ({hint})"))
    return problems


def _providers(config: Clawfile, source: YamlSource) -> list[Problem]:
    """Only "openai" may go without a base_url: any other provider's key would be sent to
    OPENAI_BASE_URL or api.openai.com. (A base_url that failed validation is reported already.)"""
    return [
        source.problem(("providers", name), _NO_BASE_URL)
        for name, provider in config.providers.items()
        if name != "openai" and source.data["providers"][name].get("base_url") is None
    ]


def _usd_limits(config: Clawfile, source: YamlSource) -> list[Problem]:
    """A limit in USD caps nothing without the price of the model it counts: each task under
    one (its own, or the clawfile-wide `budget:`) must have a model whose price is known."""
    from claw_batch.llm.prices import lookup

    problems = []
    for name, task in config.tasks.items():
        model = task.model or config.model
        if lookup(model, config.prices) is not None:
            continue
        own = task.budget if "budget" in source.data["tasks"][name] else None
        at: KeyPath = ("tasks", name, "budget") if own else ("defaults", "budget")
        limits: list[tuple[KeyPath, str]] = [
            (at, key) for key in USD_LIMITS if getattr(task.budget, key, None) is not None
        ]
        limits += [(("budget",), k) for k in USD_LIMITS if getattr(config.budget, k, None)]
        if limits:
            where, key = limits[0]
            problems.append(
                source.problem(
                    (*where, key),
                    f"no price is known for model {model!r} (task {name!r}), so {key} would "
                    f"cap nothing: add it under prices:, in USD per million tokens, e.g. "
                    f"prices: {{{model}: {{input: 0.5, output: 1.5}}}} (0 for a local model)",
                )
            )
    return problems


def _bash(name: str, task: Task, source: YamlSource) -> list[Problem]:
    if "bash" not in task.tool_names or task.permissions.bash:
        return []
    return [
        source.problem(
            (*_where(source, name, "tools"),),
            "bash needs permissions.bash: a list of command patterns, or true",
        )
    ]


def _grants(name: str, task: Task, source: YamlSource) -> list[Problem]:
    """`untrusted.allow` grants only what the task has: it keeps a tool, it adds none."""
    tools = task.offered_tools
    return [
        source.problem(
            ("tasks", name, "untrusted", "allow", index),
            f"{tool} is not one of this task's tools ({', '.join(tools) or 'none'}): "
            "there is nothing to grant",
        )
        for index, tool in enumerate(task.untrusted_allow)
        if tool not in tools and not names.is_mcp(tool)  # mcpchecks says more of those
    ]


def _passed_keys(config: Clawfile, source: YamlSource) -> list[Problem]:
    """permissions.env never names a provider's API key: the model's keys stay with claw."""
    keys = provider_keys(config)
    found: dict[KeyPath, Problem] = {}  # a default's problem once, not once per task
    for name, task in config.tasks.items():
        at = (*_where(source, name, "permissions"), "env")
        for index, variable in enumerate(task.permissions.env):
            if variable in keys:
                message = (
                    f"{variable} holds the API key of provider {keys[variable]!r}, which "
                    "never reaches tool processes; pass only what the commands need"
                )
                found.setdefault((*at, index), source.problem((*at, index), message))
    return list(found.values())


def _unknown_task(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(names)}"
    return f"unknown task {name!r} ({hint})"


def _graph(config: Clawfile, source: YamlSource) -> list[Problem]:
    """Cycles over explicit and implicit edges, and outputs two tasks can both produce."""
    from claw_batch.plan import graph

    return [
        source.problem((*_where(source, str(p.at[1]), str(p.at[2])), *p.at[3:]), p.message)
        for p in graph.analyse(config)[1]
    ]


def _task(name: str, task: Task, source: YamlSource, root: Path) -> list[Problem]:
    problems = []
    if task.check and task.json_schema is not None:
        problems.append(
            source.problem(
                _where(source, name, "schema"),
                "a check task (check: true) cannot have a schema: "
                "its verdict has a fixed one, {ok, summary, findings}",
            )
        )
    if task.batch and task.hook is not None:
        problems.append(
            source.problem(
                _where(source, name, "batch"),
                f"a task run by a git hook (hook: {task.hook}) cannot be batch: true: git "
                "waits for the hook, and a batch takes up to 24 hours",
            )
        )
    problems += _watch(name, task, source)
    problems += _watched_outputs(name, task, source)
    problems += templates.prompt(name, task, source, root)
    foreach = task.fans_out
    if task.output is not None:
        at = _where(source, name, "output")
        problems += templates.inline(task.output, at, source, foreach)
    for index, output in enumerate(task.outputs):
        at = (*_where(source, name, "outputs"), index)
        problems += templates.inline(output, at, source, foreach)
    return problems


def _watch(name: str, task: Task, source: YamlSource) -> list[Problem]:
    """A file that claw watch moves to `done:` or `failed:` must not be watched (or be an
    item) again."""
    from claw_batch.plan import overlap

    problems = []
    for key, folder in (("done", task.done), ("failed", task.failed)):
        if folder is None:
            continue
        if not task.watch:
            problems.append(
                source.problem(
                    _where(source, name, key),
                    f"{key}: is where claw watch moves a file it processed; "
                    "this task has no watch:",
                )
            )
            continue
        inside = overlap.glob_nfa(f"{folder}/**")
        for glob in dict.fromkeys((*task.watch, *task.item_globs)):
            if overlap.intersect(overlap.glob_nfa(glob), inside):
                problems.append(
                    source.problem(
                        _where(source, name, key),
                        f"{folder!r} is reached by the glob {glob!r}: a file moved "
                        "there would be processed again; use a folder the globs do not reach",
                    )
                )
    return problems


def _watched_outputs(name: str, task: Task, source: YamlSource) -> list[Problem]:
    """An output that claw watch would see as a new file of the task's own (watched and,
    with foreach, an item) starts its task again, and that one's output another, forever."""
    from claw_batch.plan import overlap

    outputs: list[tuple[KeyPath, str]] = [(_where(source, name, "output"), task.output or "")]
    outputs += [((*_where(source, name, "outputs"), i), o) for i, o in enumerate(task.outputs)]
    problems = []
    for at, output in outputs:
        if not output or not task.watch:
            continue
        written = overlap.writes(output, name)
        if task.foreach is not None and not overlap.intersect(overlap.reads(task.foreach), written):
            continue
        glob = next((g for g in task.watch if overlap.intersect(overlap.reads(g), written)), None)
        if glob is not None:
            problems.append(
                source.problem(
                    at,
                    f"{output!r} can name a file the glob {glob!r} watches: each output would "
                    "start the task again; write it where the watch globs do not reach",
                )
            )
    return problems


def _where(source: YamlSource, task: str, key: str) -> KeyPath:
    """Where a task's setting is written: in the task, or else in `defaults:`."""
    written = source.data["tasks"][task]
    return ("tasks", task, key) if key in written else ("defaults", key)

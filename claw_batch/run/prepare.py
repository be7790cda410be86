"""Everything a job is before a model sees it: its rendered prompt, system prompt, paths,
policy and tools — and so its fingerprint. Preparing a job calls no model and writes
nothing, which is what `claw plan` and the up-to-date check need."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from claw_batch.agent import answers, systemprompt
from claw_batch.config import Task, provider_keys
from claw_batch.mcp.names import is_mcp
from claw_batch.plan import render
from claw_batch.plan.fingerprint import Fingerprint, TaskParts, digest, fingerprint, task_digest
from claw_batch.plan.jobs import Job, glob_files
from claw_batch.run.context import RunCache, RunContext
from claw_batch.safety import control
from claw_batch.safety.childenv import scrubbed_env
from claw_batch.safety.paths import Policy
from claw_batch.skills import offer
from claw_batch.skills import skill as skills
from claw_batch.taint import jobtaint as taint

if TYPE_CHECKING:
    from claw_batch.tools.registry import Tool

# What `today` and `now` read as in the prompt that replay keys are computed from.
PLACEHOLDERS = {"today": "<today>", "now": "<now>"}


@dataclass(frozen=True)
class Prepared:
    job: Job
    task: Task
    prompt: str
    variables: Mapping[str, Any]  # the template variables (key_prompt renders with them)
    parts: TaskParts  # what every job of its task has the same in its fingerprint
    skills: tuple[skills.Skill, ...]
    output: str | None  # project-relative
    outputs: tuple[str, ...]
    schema: Mapping[str, Any] | None
    policy: Policy
    tools: Mapping[str, Tool]
    inputs: tuple[str, ...]  # project-relative input files (the fan-out item included)
    # What the job reads from outside before its model is called (claw_batch.taint.jobtaint): its
    # item or inputs that are outside content, what its templates showed fenced, else a
    # watch task's globs. Empty: nothing (yet; its tools may still read some).
    tainted: tuple[str, ...] = ()
    cuts: tuple[str, ...] = ()  # what its templates' read() cut (render.clipped)
    env: Mapping[str, str] = field(default_factory=dict)  # its tools' (TaskSame.env)
    tools_digest: str = ""  # of `tools`: names and schemas (TaskSame.digests)
    mcp: tuple[str, ...] = ()  # its MCP tools, as the model calls them (TaskSame.mcp)
    mcp_kept: tuple[str, ...] = ()  # those a job keeps once tainted

    @property
    def declared_outputs(self) -> tuple[str, ...]:
        return tuple(p for p in (self.output, *self.outputs) if p)

    @property
    def model(self) -> str:
        return self.parts.model


def prepare(
    run: RunContext,
    cache: RunCache,
    job: Job,
    upstream_names: tuple[str, ...] = (),
    input: Mapping[str, Any] | None = None,
) -> Prepared:
    """`input`: a sub-job's (`delegate(task=..., input=...)`), its templates' `input`; a job
    run directly sees {}."""
    task = run.project.config.tasks[job.task]
    root = run.project.root
    inputs = sorted({p for pattern in task.inputs for p in glob_files(root, pattern)})
    fenced: list[str] = []  # what the templates show fenced, as they render
    cuts: list[str] = []
    needs = upstream_names or tuple(task.needs)
    variables = _variables(run, cache, job, inputs, needs, fenced.append, cuts.append)
    variables["input"] = dict(input or {})
    schema = answers.VERDICT_SCHEMA if task.check else task.json_schema
    output = _render_path(run, job, task.output, variables)
    outputs = tuple(_render_path(run, job, p, variables) or "" for p in task.outputs)
    same = task_same(run, cache, job.task)
    parts = task_parts(run, cache, job.task)
    prompt = _prompt(run, job, variables, schema, fenced.append)
    read = tuple(sorted({*inputs, *([job.item] if job.item else [])}))
    tainted = _tainted(run, task, read, fenced)
    return Prepared(
        job=job,
        task=task,
        prompt=prompt,
        variables=variables,
        parts=parts,
        skills=same.skills,
        output=output,
        outputs=outputs,
        schema=schema,
        policy=_policy(run, cache, task, same, (output, *outputs)),
        tools=same.tainted_tools if tainted else same.tools,
        inputs=read,
        tainted=tainted,
        cuts=tuple(dict.fromkeys(cuts)),
        env=same.env,
        tools_digest=same.digests[bool(tainted)],
        mcp=tuple(same.mcp),
        mcp_kept=same.mcp_kept,
    )


@dataclass(frozen=True)
class TaskSame:
    """What every job of a task is offered and granted, whatever its item: once per run."""

    skills: tuple[skills.Skill, ...]
    tools: Mapping[str, Tool]  # for a job that read no outside content
    tainted_tools: Mapping[str, Tool]  # for one that did (offered_tools)
    granted: tuple[str, ...]  # control.granted
    skill_dirs: tuple[str, ...]  # the real directories of its skills
    # What its tools' processes start from: the run's scrubbed environment and the task's
    # `permissions.env`, never a provider's key (validation refuses those names too).
    env: Mapping[str, str]
    # The fingerprint's part of `tools` and of `tainted_tools`: names and schemas, and for
    # MCP tools their server's entry.
    digests: tuple[str, str] = ("", "")
    # Its MCP tools' names as the model calls them -> as the clawfile does (mcp.S.T); and
    # those a job keeps once it has read outside content.
    mcp: Mapping[str, str] = field(default_factory=dict)
    mcp_kept: tuple[str, ...] = ()


def task_same(run: RunContext, cache: RunCache, name: str) -> TaskSame:
    def compute() -> TaskSame:
        task = run.project.config.tasks[name]
        offered = offered_skills(run, task)
        root = run.project.root
        tools, tainted = offered_tools(task), offered_tools(task, tainted=True)
        digests = (_tools_digest(tuple(tools)), _tools_digest(tuple(tainted)))
        mcp: dict[str, str] = {}
        kept: tuple[str, ...] = ()
        if any(is_mcp(t) for t in task.tool_names):
            from claw_batch.run import mcptools

            offer = mcptools.offer(run, name, task)
            tools.update(offer.tools)
            tainted.update(offer.kept)
            digests = (offer.digest(digests[0], offer.tools), offer.digest(digests[1], offer.kept))
            mcp, kept = offer.qualified, tuple(offer.kept)
        return TaskSame(
            skills=offered,
            tools=MappingProxyType(tools),
            tainted_tools=MappingProxyType(tainted),
            granted=control.granted(task),
            skill_dirs=tuple(d for s in offered if (d := s.readable_directory(root))),
            env=MappingProxyType(_tool_env(run, task)),
            digests=digests,
            mcp=MappingProxyType(mcp),
            mcp_kept=kept,
        )

    return cache.same(name, compute)


def _tool_env(run: RunContext, task: Task) -> dict[str, str]:
    keys = provider_keys(run.project.config)
    names = [n for n in task.permissions.env if n not in keys]
    return {**scrubbed_env(names), **run.env}


def task_parts(run: RunContext, cache: RunCache, name: str) -> TaskParts:
    """What every job of the task has the same in its fingerprint: once per run."""

    def compute() -> TaskParts:
        task = run.project.config.tasks[name]
        offered = offered_skills(run, task)
        system = system_prompt(run, Job(name), offered)
        return TaskParts(
            digest=_definition_digest(run, name),
            system=system.key_text,
            skills=skill_digests(offered),
            model=run.model_override or task.model or run.project.config.model,
            context=digest(system.key_context),
            skills_tokens=offer.tokens(offered, run.project.root),
        )

    return cache.parts(name, compute)


def _definition_digest(run: RunContext, name: str) -> str:
    """The task definition's digest; for a task that delegates, with the definitions and
    prompts of the tasks it may delegate to (theirs too): a changed sub-task makes the
    parent run again, as a changed prompt would. A task that delegates to none keeps the
    digest it always had."""
    tasks = run.project.config.tasks
    own = task_digest(tasks[name].definition)
    reached: dict[str, list[str]] = {}
    todo = list(tasks[name].delegate.tasks)
    while todo:
        other = todo.pop()
        if other in reached or other == name or other not in tasks:
            continue
        source, _ = run.project.prompt_source(other)
        reached[other] = [task_digest(tasks[other].definition), digest(source)]
        todo += tasks[other].delegate.tasks
    return digest({"task": own, "delegates": reached}) if reached else own


def _tainted(
    run: RunContext, task: Task, read: tuple[str, ...], fenced: list[str]
) -> tuple[str, ...]:
    """What the job reads from outside before its model is called (Prepared.tainted)."""
    found = [path for path in read if run.outside(path)] + fenced
    if not found and task.watch:  # what it is run for comes from outside, whatever it reads
        found.append(", ".join(task.watch))
    return tuple(dict.fromkeys(found))


def key_prompt(run: RunContext, p: Prepared) -> str:
    """The prompt rendered with placeholders for the date and time: what replay keys use.
    Only a job that runs needs it."""
    return _prompt(run, p.job, {**p.variables, **PLACEHOLDERS}, p.schema)


def estimate(run: RunContext, p: Prepared) -> int:
    """The prompt tokens of the job's first model call: what `claw plan` shows."""
    # The tool loop and the messages only when a dry run asks (a no-op never does).
    from claw_batch.agent.loop import prompt_tokens
    from claw_batch.llm.messages import Message

    system = system_prompt(run, p.job, p.skills).text
    specs = [t.spec() for t in p.tools.values()]
    return prompt_tokens([Message("system", system), Message("user", p.prompt)], specs)


def system_prompt(
    run: RunContext, job: Job, offered: tuple[skills.Skill, ...]
) -> systemprompt.SystemPrompt:
    return systemprompt.build_system_prompt(
        root=run.project.root,
        workspace=run.workspace,
        task=job.task,
        skills=offered,
        today=run.now.date(),
    )


def fingerprint_of(
    p: Prepared,
    hash_file: Callable[[str], str | None],
    upstream: Mapping[str, str | None],
) -> Fingerprint:
    """The job's fingerprint; `hash_file` hashes a project-relative path (None: missing)."""
    return fingerprint(
        task=p.parts.digest,
        prompt=p.prompt,
        system=p.parts.system,
        skills=p.parts.skills,
        model=f"{p.model}@{p.task.temperature}",
        tools=p.tools_digest or _tools_digest(tuple(p.tools)),
        inputs={path: hash_file(path) for path in p.inputs},
        upstream=upstream,
        context=p.parts.context,
        skills_tokens=p.parts.skills_tokens,
    )


def tools_digest(tools: Mapping[str, Tool]) -> str:
    """The tool set and its schemas, as a job's fingerprint covers them."""
    return digest({"names": list(tools), "specs": [t.spec().parameters for t in tools.values()]})


@functools.lru_cache(maxsize=64)
def _tools_digest(names: tuple[str, ...]) -> str:
    """The built-in tools' digest: the same for every job of a task."""
    from claw_batch.tools.registry import TOOLS

    return tools_digest({n: TOOLS[n] for n in names})


def skill_digests(offered: Sequence[skills.Skill]) -> dict[str, str]:
    """What the model may read of each skill: SKILL.md and every file beside and below it
    (references/, scripts/). Once per task per run."""
    return {s.name: digest(skills.files(s)) for s in offered}


def _variables(
    run: RunContext,
    cache: RunCache,
    job: Job,
    inputs: list[str],
    upstream_names: tuple[str, ...],
    saw: Callable[[str], None],
    cut: Callable[[str], None],
) -> dict[str, Any]:
    """The template variables of one job; `saw` is told of each outside content they show
    (fenced), as they show it, `cut` of each file read() cut."""
    root = run.project.root
    # `files` is a plain list: a job is tainted by the outside names in it if it may show them.
    shows_files = _reads(run.project.config.tasks[job.task], "files")
    variables: dict[str, Any] = {
        "task": job.task,
        "today": run.now.date().isoformat(),
        "now": run.now.isoformat(timespec="seconds"),
        "inputs": inputs,
        "needs": taint.needs_view(render.needs_view(cache.upstream, upstream_names), saw),
        "files": render.listing(run.files, run.outside, "files", saw if shows_files else None),
        "git": render.GitInfo(root, saw),
        # Over the helpers: these know the ledger, and taint the job.
        "read": render.reader(root, run.outside, saw, cut),
        "glob": render.globber(root, run.outside, saw),
    }
    if job.item is not None:
        variables["item"] = render.Item.of(job.item, outside=run.outside(job.item))
    return variables


INCLUDES = "{% include %}"  # as templatecheck.INCLUDES (which imports Jinja) names it


def _reads(task: Task, name: str) -> bool:
    """Whether the task's templates may read the variable (an included one: they may)."""
    return task.variables is None or not task.variables.isdisjoint({name, INCLUDES})


def _prompt(
    run: RunContext,
    job: Job,
    variables: Mapping[str, Any],
    schema: Mapping[str, Any] | None,
    saw: Callable[[str], None] | None = None,
) -> str:
    source, name = run.project.prompt_source(job.task)
    task = run.project.config.tasks[job.task]
    untrusted = run.project.config.untrusted
    prompt = render.render(
        source,
        name,
        variables,
        root=run.project.root,
        untrusted=untrusted,
        outside=run.outside,
        saw=saw,
    )
    if schema is not None:  # first: the same for every job of the task (prefix caches)
        check = task.check
        prompt = answers.instructions(schema, check=check) + prompt + answers.reminder(check=check)
    return prompt


def _render_path(
    run: RunContext, job: Job, template: str | None, variables: Mapping[str, Any]
) -> str | None:
    if template is None:
        return None
    where = f"clawfile.yaml:tasks.{job.task}"
    shown = variables.get("item")
    # A path names the file as it is (a prompt shows it defused): the prompt's item, unless
    # that is shown defused (outside content, a name not UTF-8).
    if job.item is not None and not (isinstance(shown, render.Item) and type(shown.path) is str):
        variables = {**variables, "item": render.Item.of(job.item)}
    untrusted = run.project.config.untrusted  # an {% include %} of such a file is fenced
    return render.render(
        template, where, variables, root=run.project.root, untrusted=untrusted, outside=run.outside
    ).strip()


def tool_names(task: Task) -> tuple[str, ...]:
    """The tools the task offers: its `tools:`, and bash with `permissions.bash`."""
    return task.offered_tools


def offered_tools(task: Task, *, tainted: bool = False) -> dict[str, Tool]:
    """The job's tools: its task's, and for a job that reads outside content only the
    read-only ones and what the task grants it (`untrusted.allow`)."""
    from claw_batch.tools.registry import TOOLS

    names = tool_names(task)
    if tainted:
        names = tuple(n for n in names if n in taint.READ_ONLY or n in task.untrusted_allow)
    return {n: TOOLS[n] for n in names if n in TOOLS}  # its MCP tools: run.mcptools


def offered_skills(run: RunContext, task: Task) -> tuple[skills.Skill, ...]:
    return tuple(skills.select(run.skills, task.skills, tool_names(task)))


def _policy(
    run: RunContext, cache: RunCache, task: Task, same: TaskSame, paths: tuple[str | None, ...]
) -> Policy:
    """Where the job's tools may read and write: `paths`, its rendered outputs."""
    cassettes = run.models.mode.cassettes
    ctl = cache.control(lambda: control.of(run.project, cassettes))
    return Policy(
        run.project.root,
        write_globs=tuple(task.permissions.write),
        outputs=tuple(p for p in paths if p),
        protected=ctl.never,
        control=ctl.paths,
        granted=same.granted,
        untrusted=run.project.config.untrusted,
        skill_dirs=same.skill_dirs,
    )

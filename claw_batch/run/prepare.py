"""Everything a job is before a model sees it: its rendered prompt, system prompt, paths,
policy and tools — and so its fingerprint. Preparing a job calls no model and writes
nothing, which is what `claw plan` and the up-to-date check need."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_batch import globs
from claw_batch.agent import answers
from claw_batch.agent import systemprompt as context
from claw_batch.config import Project, Task
from claw_batch.llm.endpoints import Models
from claw_batch.plan import render
from claw_batch.plan.jobs import Job, glob_files
from claw_batch.plan.uptodate import Fingerprint, digest, fingerprint, task_digest
from claw_batch.safety import control, untrusted
from claw_batch.safety.paths import Policy
from claw_batch.skills import skill as skills
from claw_batch.taint import jobtaint as taint

if TYPE_CHECKING:
    from claw_batch.agent.budget import Spend
    from claw_batch.taint.ledger import TaintedFiles
    from claw_batch.tools.registry import Tool

# What `today` and `now` read as in the prompt that replay keys are computed from.
PLACEHOLDERS = {"today": "<today>", "now": "<now>"}


@dataclass(frozen=True)
class RunContext:
    """What every job of one run shares."""

    project: Project
    models: Models
    now: dt.datetime
    env: Mapping[str, str]  # the scrubbed environment for tool processes
    files: tuple[str, ...] = ()
    model_override: str | None = None
    upstream: dict[str, render.Upstream] = field(default_factory=dict)
    skills: tuple[skills.Skill, ...] = ()  # discovered once per run
    spend: Spend | None = None  # what the run's jobs may spend (None: a dry run)
    redact: Callable[[str], str] = str  # the run's Redactor
    tainted: TaintedFiles | None = None  # which files are outside content (None: the globs)
    # Per task, what is the same for all its items within a run: computed once.
    per_task: dict[tuple[str, str], Any] = field(default_factory=dict)

    @property
    def workspace(self) -> str:
        return self.project.config.workspace

    def outside(self, rel: str) -> bool:
        """Whether a project file is outside content: watched, or written by a tainted job."""
        if self.tainted is not None:
            return self.tainted.outside(rel)
        return any(globs.match(g, rel) for g in self.project.config.untrusted)


@dataclass(frozen=True)
class Prepared:
    job: Job
    task: Task
    prompt: str
    variables: Mapping[str, Any]  # the template variables (key_prompt renders with them)
    system_key: str  # the system prompt with placeholders (the real one is built to run)
    task_digest: str
    skills: tuple[skills.Skill, ...]
    skill_digests: Mapping[str, str]  # per offered skill, its files' content
    output: str | None  # project-relative
    outputs: tuple[str, ...]
    schema: Mapping[str, Any] | None
    policy: Policy
    tools: Mapping[str, Tool]
    model: str  # as the clawfile names it: "provider/name" or "name"
    inputs: tuple[str, ...]  # project-relative input files (the fan-out item included)
    # What the job reads from outside before its model is called (claw_batch.taint.jobtaint): its
    # item or inputs that are outside content, what its templates showed fenced, else a
    # watch task's globs. Empty: nothing (yet; its tools may still read some).
    tainted: tuple[str, ...] = ()

    @property
    def declared_outputs(self) -> tuple[str, ...]:
        return tuple(p for p in (self.output, *self.outputs) if p)


def prepare(run: RunContext, job: Job, upstream_names: tuple[str, ...] = ()) -> Prepared:
    task = run.project.config.tasks[job.task]
    root = run.project.root
    inputs = sorted({p for pattern in task.inputs for p in glob_files(root, pattern)})
    fenced: list[str] = []  # what the templates show fenced, as they render
    variables = _variables(run, job, inputs, upstream_names or tuple(task.needs), fenced.append)
    schema = answers.VERDICT_SCHEMA if task.check else task.json_schema
    output = _render_path(run, job, task.output, variables)
    outputs = tuple(_render_path(run, job, p, variables) or "" for p in task.outputs)
    offered = offered_skills(run, task)
    system_key = _once(run, job.task, "system", lambda: system_prompt(run, job, offered).key_text)
    prompt = _prompt(run, job, variables, schema, fenced.append)
    read = tuple(sorted({*inputs, *([job.item] if job.item else [])}))
    tainted = _tainted(run, task, read, fenced)
    return Prepared(
        job=job,
        task=task,
        prompt=prompt,
        variables=variables,
        system_key=system_key,
        task_digest=_once(run, job.task, "digest", lambda: task_digest(task.definition)),
        skills=offered,
        skill_digests=_once(run, job.task, "skills", lambda: skill_digests(offered)),
        output=output,
        outputs=outputs,
        schema=schema,
        policy=policy_for(run, task, output, outputs, offered),
        tools=offered_tools(task, tainted=bool(tainted)),
        model=run.model_override or task.model or run.project.config.model,
        inputs=read,
        tainted=tainted,
    )


NOT_UTF8 = "name not UTF-8"  # the reason of a job that cannot run for its file's name


def unrecordable(job: Job) -> str | None:
    """Why the job cannot run (None: it can): its file's name is not UTF-8 (a dropped
    file's, a stranger's), which the ledger, the transcripts and the reports cannot hold.
    Only that job fails: the name is the file's, not the clawfile's."""
    if job.item is None or job.item.isascii() or untrusted.printable(job.item) == job.item:
        return None  # (isascii first: a no-op asks this of every job)
    return (
        f"{untrusted.printable(job.item)}: the file's name is not UTF-8, and claw records "
        "only names that are; rename the file to run this job"
    )


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


def system_prompt(
    run: RunContext, job: Job, offered: tuple[skills.Skill, ...]
) -> context.SystemPrompt:
    return context.build_system_prompt(
        root=run.project.root,
        workspace=run.workspace,
        task=job.task,
        skills=offered,
        today=run.now.date(),
    )


def _once(run: RunContext, task: str, what: str, compute: Callable[[], Any]) -> Any:
    key = (task, what)
    if key not in run.per_task:
        run.per_task[key] = compute()
    return run.per_task[key]


def fingerprint_of(
    p: Prepared,
    hash_file: Callable[[str], str | None],
    upstream: Mapping[str, str | None],
) -> Fingerprint:
    """The job's fingerprint; `hash_file` hashes a project-relative path (None: missing)."""
    return fingerprint(
        task=p.task_digest,
        prompt=p.prompt,
        system=p.system_key,
        skills=p.skill_digests,
        model=f"{p.model}@{p.task.temperature}",
        tools=_tools_digest(tuple(p.tools)),
        inputs={path: hash_file(path) for path in p.inputs},
        upstream=upstream,
    )


# Template variables whose values are the same for every run of a job with the same item
# content and shared inputs: a task reading only these may take the quick check (`task_key`).
STABLE_VARIABLES = frozenset({"item", "task", "inputs"})
# ... and those whose values the task key holds itself: the staged changes a pre-commit review
# reads (three git calls, no rendering), the `--files` of a hook run.
KEYED_VARIABLES = frozenset({"git", "files"})


@dataclass(frozen=True)
class TaskKey:
    """What a job's fingerprint holds besides its item, for a task whose fingerprint is a
    function of it and of the item's content: its templates read only STABLE_VARIABLES and
    it has no `needs:`. A job that succeeds stores `seal(...)`: this key and the stat keys
    (mtime, size, inode) its item and outputs had when they were hashed. While the key and
    those stat keys are the same, the job is up to date without rendering, hashing or
    reading anything — make's check. Anything else takes the full check."""

    value: str
    shared: Mapping[str, str | None]  # the task's own `inputs:` and their hashes

    def quick(self, stamp: str) -> str:
        return hashlib.sha256(f"{self.value}\0{stamp}".encode()).hexdigest()

    def seal(self, fp: Fingerprint, stamp: str | None, outputs: Sequence[str]) -> str | None:
        """The done row's `quick`: the quick digest, then one output path per line. None
        when the job's inputs are not the ones this key saw (a file changed in between)."""
        inputs = fp.parts["inputs"]
        if stamp is None or any(inputs.get(path) != h for path, h in self.shared.items()):
            return None
        if any("\n" in path for path in outputs):
            return None
        return "\n".join([self.quick(stamp), *outputs])

    @staticmethod
    def first_output(sealed: str) -> str | None:
        paths = sealed.split("\n", 2)
        return paths[1] if len(paths) > 1 else None

    def unchanged(
        self, sealed: str, item: str | None, stamp: Callable[[list[str]], str | None]
    ) -> bool:
        """Whether a job sealed as `sealed` is up to date; `stamp` gives files' stat keys now."""
        quick, *outputs = sealed.split("\n")
        now = stamp([item, *outputs] if item else outputs)
        return now is not None and quick == self.quick(now)


def task_key(run: RunContext, name: str, hash_file: Callable[[str], str | None]) -> TaskKey | None:
    """The task's key, or None when its jobs need the full check."""
    task = run.project.config.tasks[name]
    if task.needs or task.always or task.variables is None:
        return None
    if not task.variables <= STABLE_VARIABLES | KEYED_VARIABLES:
        return None
    root = run.project.root
    offered = offered_skills(run, task)
    shared = sorted({p for pattern in task.inputs for p in glob_files(root, pattern)})
    hashes = {path: hash_file(path) for path in shared}
    value = digest(
        {
            "code": code_stamp(),  # tool schemas, prompt instructions: claw's own code
            "task": _once(run, name, "digest", lambda: task_digest(task.definition)),
            "prompt": run.project.prompt_source(name)[0],
            "system": _once(
                run, name, "system", lambda: system_prompt(run, Job(name), offered).key_text
            ),
            "skills": _once(run, name, "skills", lambda: skill_digests(offered)),
            "model": f"{run.model_override or task.model or run.project.config.model}",
            "tools": sorted(tool_names(task)),
            "untrusted": list(run.project.config.untrusted),  # what is fenced, tools withheld
            "inputs": hashes,
            "files": list(run.files) if "files" in task.variables else None,
            "git": _git_state(root) if "git" in task.variables else None,
        }
    )
    return TaskKey(value, hashes)


def _git_state(root: Path) -> list[str]:
    """What `git.*` can show a template: the staged diff and files, and HEAD."""
    git = render.GitInfo(root)
    return [digest(git.staged_diff), digest(git.staged_files), git.head]


@functools.cache
def code_stamp() -> str:
    """Which claw this is, down to its source files (an editable install changes under the
    same version): mtime and size of every module."""
    package = Path(__file__).parent.parent  # claw_batch/
    stamps = []
    for directory, _, files in os.walk(package):
        for file in files:
            if file.endswith(".py"):
                st = os.stat(os.path.join(directory, file))
                stamps.append(f"{directory}/{file}:{st.st_mtime_ns}:{st.st_size}")
    return digest(sorted(stamps))


@functools.lru_cache(maxsize=64)
def _tools_digest(names: tuple[str, ...]) -> str:
    """The tool set and its schemas: the same for every job of a task."""
    from claw_batch.tools.registry import TOOLS  # builds a model per tool: only when needed

    return digest({"names": list(names), "specs": [TOOLS[n].spec().parameters for n in names]})


def skill_digests(offered: Sequence[skills.Skill]) -> dict[str, str]:
    """What the model may read of each skill: SKILL.md and every file beside and below it
    (references/, scripts/). Once per task per run."""
    return {s.name: digest(skills.files(s)) for s in offered}


def _variables(
    run: RunContext,
    job: Job,
    inputs: list[str],
    upstream_names: tuple[str, ...],
    saw: Callable[[str], None],
) -> dict[str, Any]:
    """The template variables of one job; `saw` is told of each outside content they show
    (fenced), as they show it."""
    root = run.project.root
    # `files` is a plain list: a job is tainted by the outside names in it if it may show them.
    shows_files = _reads(run.project.config.tasks[job.task], "files")
    variables: dict[str, Any] = {
        "task": job.task,
        "today": run.now.date().isoformat(),
        "now": run.now.isoformat(timespec="seconds"),
        "inputs": inputs,
        "needs": taint.needs_view(render.needs_view(run.upstream, upstream_names), saw),
        "files": render.listing(run.files, run.outside, "files", saw if shows_files else None),
        "git": render.GitInfo(root, saw),
        # Over the helpers: these know the ledger, and taint the job.
        "read": render.reader(root, run.outside, saw),
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
    if schema is not None:
        prompt += answers.instructions(schema, check=task.check)
    return prompt


def _render_path(
    run: RunContext, job: Job, template: str | None, variables: Mapping[str, Any]
) -> str | None:
    if template is None:
        return None
    where = f"clawfile.yaml:tasks.{job.task}"
    if job.item is not None:  # a path names the file as it is (a prompt shows it defused)
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
    return {n: TOOLS[n] for n in names if n in TOOLS}


def offered_skills(run: RunContext, task: Task) -> tuple[skills.Skill, ...]:
    return tuple(skills.select(run.skills, task.skills, tool_names(task)))


def policy_for(
    run: RunContext,
    task: Task,
    output: str | None,
    outputs: tuple[str, ...],
    offered: tuple[skills.Skill, ...] = (),
) -> Policy:
    declared = tuple(p for p in [output, *outputs] if p)
    cassettes = run.models.mode.cassettes
    ctl: control.Control = _once(run, "", "control", lambda: control.of(run.project, cassettes))
    return Policy(
        run.project.root,
        write_globs=tuple(task.permissions.write),
        outputs=declared,
        protected=ctl.never,
        control=ctl.paths,
        granted=control.granted(task),
        untrusted=run.project.config.untrusted,
        skill_dirs=tuple(d for s in offered if (d := s.readable_directory(run.project.root))),
    )

"""Run one job: render its prompt, build its context, run the tool loop, check and write
its result, keep its transcript."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claw_batch import answers, context, render, skills
from claw_batch.atomic import write_atomic
from claw_batch.clawfile import Project, Task
from claw_batch.endpoints import Models
from claw_batch.errors import TaskFailed, ToolError
from claw_batch.jobs import Job, glob_files
from claw_batch.loop import EventSink, LoopResult, LoopSettings, ToolLoop
from claw_batch.messages import Message
from claw_batch.paths import Policy
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS, Tool

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

    @property
    def workspace(self) -> str:
        return self.project.config.workspace


@dataclass(frozen=True)
class Outcome:
    text: str  # the final answer as written to `output`
    loop: LoopResult
    output: str | None  # project-relative output path
    verdict: dict[str, Any] | None = None


def template_variables(run: RunContext, task_name: str, job: Job) -> dict[str, Any]:
    task = run.project.config.tasks[task_name]
    root = run.project.root
    inputs = sorted({p for pattern in task.inputs for p in glob_files(root, pattern)})
    variables: dict[str, Any] = {
        "task": task_name,
        "today": run.now.date().isoformat(),
        "now": run.now.isoformat(timespec="seconds"),
        "inputs": inputs,
        "needs": render.needs_view(run.upstream, task.needs),
        "files": list(run.files),
        "git": render.GitInfo(root),
    }
    if job.item is not None:
        variables["item"] = render.Item.of(job.item)
    return variables


def render_text(run: RunContext, text: str, name: str, variables: Mapping[str, Any]) -> str:
    return render.render(text, name, variables, root=run.project.root)


def offered_tools(task: Task) -> dict[str, Tool]:
    names = list(task.tool_names)
    if task.permissions.bash and "bash" not in names:
        names.append("bash")
    return {n: TOOLS[n] for n in names if n in TOOLS}


def policy_for(run: RunContext, task: Task, output: str | None, outputs: list[str]) -> Policy:
    declared = tuple(p for p in [output, *outputs] if p)
    return Policy(
        run.project.root,
        write_globs=tuple(task.permissions.write),
        outputs=declared,
        protected=(".git", ".claw", f"{run.workspace}/memory"),
    )


class JobExecution:
    def __init__(self, run: RunContext, job: Job, on_event: EventSink) -> None:
        self.run = run
        self.job = job
        self.task = run.project.config.tasks[job.task]
        self.on_event = on_event

    def execute(self) -> Outcome:
        started = time.monotonic()
        variables = template_variables(self.run, self.job.task, self.job)
        output = self._render_path(self.task.output, variables)
        outputs = [self._render_path(p, variables) or "" for p in self.task.outputs]
        schema = answers.VERDICT_SCHEMA if self.task.check else self.task.json_schema
        prompt = self._prompt(variables, schema)
        key_prompt = self._prompt({**variables, **PLACEHOLDERS}, schema)
        system = self._system_prompt()
        keys = (Message("system", system.key_text), Message("user", key_prompt))
        self.policy = policy_for(self.run, self.task, output, outputs)
        output_path = self._output_path(output)  # refuse a bad output before paying a model
        loop = self._loop(started, keys, schema)
        self.on_event("system", content=system.text)
        self.on_event("user", content=prompt)
        result = loop.run([Message("system", system.text), Message("user", prompt)])
        return self._finish(result, output, output_path, outputs, schema)

    def _prompt(self, variables: Mapping[str, Any], schema: Mapping[str, Any] | None) -> str:
        source, name = self.run.project.prompt_source(self.job.task)
        prompt = render_text(self.run, source, name, variables)
        if schema is not None:
            prompt += answers.instructions(schema, check=self.task.check)
        return prompt

    def _render_path(self, template: str | None, variables: Mapping[str, Any]) -> str | None:
        if template is None:
            return None
        where = f"clawfile.yaml:tasks.{self.job.task}"
        return render_text(self.run, template, where, variables).strip()

    def _system_prompt(self) -> context.SystemPrompt:
        root = self.run.project.root
        found = skills.discover(skills.skill_dirs(root, self.run.workspace))
        return context.build_system_prompt(
            root=root,
            workspace=self.run.workspace,
            task=self.job.task,
            skills=skills.select(found, self.task.skills),
            today=self.run.now.date(),
        )

    def _loop(
        self,
        started: float,
        key_messages: tuple[Message, ...],
        schema: Mapping[str, Any] | None,
    ) -> ToolLoop:
        model = self.run.model_override or self.task.model or self.run.project.config.model
        llm, model_name = self.run.models.get(model)
        deadline = started + self.task.timeout
        ctx = ToolContext(
            root=self.run.project.root,
            policy=self.policy,
            env=self.run.env,
            deadline=deadline,
            bash_allow=_bash_allow(self.task),
            workspace=self.run.workspace,
        )
        settings = LoopSettings(
            model=model_name,
            temperature=self.task.temperature,
            max_steps=self.task.max_steps,
            deadline=deadline,
            timeout=self.task.timeout,
            job=self.job.name,
            key_messages=key_messages,
            max_tokens=self.task.budget.max_tokens if self.task.budget else None,
        )
        return ToolLoop(
            llm,
            offered_tools(self.task),
            ctx,
            settings,
            on_event=self.on_event,
            check_answer=answers.checker(schema) if schema is not None else None,
        )

    def _output_path(self, output: str | None) -> Path | None:
        if not output:
            return None
        try:
            return self.policy.resolve_write(output)
        except ToolError as e:
            raise TaskFailed(f"output {output}: {e}") from e

    def _finish(
        self,
        result: LoopResult,
        output: str | None,
        output_path: Path | None,
        outputs: list[str],
        schema: Mapping[str, Any] | None,
    ) -> Outcome:
        text = answers.normalise(result.text) if schema is not None else result.text + "\n"
        missing = [p for p in outputs if not (self.run.project.root / p).is_file()]
        if missing:
            raise TaskFailed(f"declared output(s) not created: {', '.join(missing)}")
        if output_path is not None:
            try:
                write_atomic(output_path, text)
            except OSError as e:  # a directory in the way, a full disk: the old file stays
                raise TaskFailed(f"output {output}: {e.strerror or e}") from e
        verdict = json.loads(text) if self.task.check else None
        return Outcome(text, result, output, verdict)


def _bash_allow(task: Task) -> tuple[str, ...] | bool:
    bash = task.permissions.bash
    return tuple(bash) if isinstance(bash, list) else bool(bash)

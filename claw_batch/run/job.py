"""Run one prepared job: the tool loop, then check and write its result."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_batch.agent import answers
from claw_batch.agent.budget import JobBudget
from claw_batch.agent.loop import EventSink, LoopResult, LoopSettings, ToolLoop
from claw_batch.config import Task, provider_keys
from claw_batch.errors import TaskFailed, ToolError
from claw_batch.llm.messages import Message
from claw_batch.run.prepare import Prepared, RunContext, key_prompt, system_prompt
from claw_batch.safety.childenv import scrubbed_env
from claw_batch.safety.paths import Policy, checked_output
from claw_batch.safety.safeopen import write_file
from claw_batch.sandbox import bubblewrap as sandbox
from claw_batch.taint.jobtaint import JobTaint
from claw_batch.tools.base import ToolContext


@dataclass(frozen=True)
class Outcome:
    text: str  # the final answer as written to `output`
    loop: LoopResult
    output: str | None  # project-relative output path
    verdict: dict[str, Any] | None = None


class JobExecution:
    def __init__(
        self,
        run: RunContext,
        prepared: Prepared,
        on_event: EventSink,
        *,
        before_call: Callable[[], None] | None = None,
        taint: JobTaint | None = None,
    ) -> None:
        self.run = run
        self.p = prepared
        self.on_event = on_event
        self.before_call = before_call
        self.taint = taint or JobTaint(sources=prepared.tainted, tools=prepared.task.offered_tools)

    def execute(self) -> Outcome:
        started = time.monotonic()
        p = self.p
        output_path = self._output_path()  # refuse a bad output before paying a model
        system = system_prompt(self.run, p.job, p.skills)  # now: with the latest daily notes
        # Redacted before the model sees them, as tool results are: a key a prompt shows (a
        # staged .env in the diff, a file read()) it could pass on reversed, past redaction.
        redact = self.run.redact
        prompt = redact(p.prompt)
        keys = (
            Message("system", redact(system.key_text)),
            Message("user", redact(key_prompt(self.run, p))),
        )
        loop = self._loop(started, keys)
        self.on_event("system", content=redact(system.text))
        self.on_event("user", content=prompt)
        result = loop.run([Message("system", redact(system.text)), Message("user", prompt)])
        return self._finish(result, output_path)

    def _loop(self, started: float, key_messages: tuple[Message, ...]) -> ToolLoop:
        p, task = self.p, self.p.task
        llm, model_name = self.run.models.get(p.model)
        deadline = started + task.timeout
        ctx = ToolContext(
            root=self.run.project.root,
            policy=p.policy,
            env=self._env(),
            deadline=deadline,
            bash_allow=_bash_allow(task),
            sandbox=None if task.sandbox == "none" else _sandbox(p.policy, task),
            workspace=self.run.workspace,
            today=self.run.now.date(),
            taint=self.taint,
            on_event=self.on_event,
            redact=self.run.redact,
        )
        settings = LoopSettings(
            model=model_name,
            temperature=task.temperature,
            max_steps=task.max_steps,
            deadline=deadline,
            timeout=task.timeout,
            job=p.job.name,
            key_messages=key_messages,
        )
        schema = p.schema
        return ToolLoop(
            llm,
            p.tools,
            ctx,
            settings,
            on_event=self.on_event,
            before_call=self.before_call,
            check_answer=answers.checker(schema) if schema is not None else None,
            budget=self._budget(),
        )

    def _env(self) -> dict[str, str]:
        """The run's scrubbed environment and the task's `permissions.env`, never a
        provider's key (validation refuses those names too)."""
        keys = provider_keys(self.run.project.config)
        names = [n for n in self.p.task.permissions.env if n not in keys]
        return {**scrubbed_env(names), **self.run.env}

    def _budget(self) -> JobBudget:
        task = self.p.task
        if self.run.spend is not None:
            return self.run.spend.job(self.p.job.task, self.p.model)
        return JobBudget.tokens_only(task.budget.max_tokens if task.budget else None)

    def _output_path(self) -> Path | None:
        return checked_output(self.p.policy, self.p.output) if self.p.output else None

    def _finish(self, result: LoopResult, output_path: Path | None) -> Outcome:
        p = self.p
        text = answers.normalise(result.text) if p.schema is not None else result.text + "\n"
        # Redacted at the source: the output file, the ledger's copy and what downstream tasks
        # and the daily note see are one text, and none of them holds a key.
        text = self.run.redact(text)
        # What the job's tools made of its other outputs: checked as `output` was.
        missing = [o for o in p.outputs if not checked_output(p.policy, o).is_file()]
        if missing:
            raise TaskFailed(f"declared output(s) not created: {', '.join(missing)}")
        if output_path is not None:
            data = text.encode()
            try:  # into the folder that was checked, even if a symlink has replaced it since
                with self.taint.writing(str(p.output), data):  # tainted: recorded first
                    write_file(p.policy.root, output_path, str(p.output), data)
            except ToolError as e:
                raise TaskFailed(f"output {p.output}: {e}") from e
            except OSError as e:  # a full disk: the old file stays
                raise TaskFailed(f"output {p.output}: {e.strerror or e}") from e
        verdict = json.loads(text) if p.task.check else None
        return Outcome(text, result, p.output, verdict)


def _sandbox(policy: Policy, task: Task) -> sandbox.Bubblewrap:
    asked = task.limits
    default = sandbox.Limits()
    limits = dataclasses.replace(
        default, memory=asked.memory or default.memory, disk=asked.disk or default.disk
    )
    return sandbox.for_job(policy, network=task.permissions.network, limits=limits)


def _bash_allow(task: Task) -> tuple[str, ...] | bool:
    # Patterns come as a tuple: taken for a list, they read as `bash: true`.
    bash = task.permissions.bash
    return bash if isinstance(bash, bool) else tuple(bash)

"""Run one job: its row in the ledger and its transcript opened, the tool loop, its output
checked and written, and what became of it recorded. `run_job` is the way in: what ends the
job is caught there; what ends the run (a clawfile or template error, a replay miss)
propagates, the job's records closed first."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_batch import startup
from claw_batch.agent import answers
from claw_batch.agent.budget import JobBudget
from claw_batch.agent.loop import LoopResult, LoopSettings, ToolLoop
from claw_batch.config import Task
from claw_batch.errors import LimitExceeded, TaskFailed, ToolError
from claw_batch.llm.messages import Message
from claw_batch.plan.fingerprint import CALLED, Fingerprint
from claw_batch.plan.jobs import Job
from claw_batch.plan.uptodate import Decision
from claw_batch.run.context import RunContext
from claw_batch.run.jobsink import EventSink, JobSink
from claw_batch.run.prepare import Prepared, key_prompt, system_prompt
from claw_batch.run.record import Recorder
from claw_batch.run.results import JobResult, Status, spent
from claw_batch.safety.atomic import DirSyncs
from claw_batch.safety.paths import Policy, checked_output
from claw_batch.safety.safeopen import write_file
from claw_batch.sandbox.deferred import Deferred
from claw_batch.store.transcript import Transcript
from claw_batch.taint.jobtaint import JobTaint
from claw_batch.taint.ledger import Writer
from claw_batch.terminal.progress import Progress
from claw_batch.tools.base import Delegate, ToolContext

# Seconds a batch job may take beyond its timeout: the provider's 24 h completion window.
BATCH_WINDOW = 24 * 3600.0

if TYPE_CHECKING:
    from claw_batch.sandbox.bubblewrap import Bubblewrap


# What gives a job its `delegate` tool's Delegate (claw_batch.run.delegation.SubJobs):
# (its prepared job, its budget, its taint, its deadline, its event sink) -> None when its
# tools do not include delegate.
Delegates = Callable[["Prepared", JobBudget, JobTaint, float, EventSink], "Delegate | None"]


@dataclass(frozen=True)
class Nesting:
    """A sub-job's place under its parent (claw_batch.run.delegation): its name in requests
    and the ledger, its parent's deadline and budget, the key prompt of an ad-hoc one."""

    name: str
    deadline: float
    budget: JobBudget
    key_prompt: str | None = None  # an ad-hoc sub-job's prompt as replay keys take it


@dataclass(frozen=True)
class Outcome:
    text: str  # the final answer as written to `output`
    loop: LoopResult
    output: str | None  # project-relative output path
    verdict: dict[str, Any] | None = None


def run_job(
    run: RunContext,
    p: Prepared,
    fp: Fingerprint,
    decision: Decision,
    *,
    records: Recorder,
    progress: Progress,
    read_outside: Callable[[Job], None],
    delegates: Delegates | None = None,
) -> JobResult:
    """Run the job, record what became of it, and return that; `read_outside` is told
    of it when it read outside content; `delegates` gives it its sub-jobs' Delegate."""
    job = p.job
    taint = job_taint(run, p, records.run_id)
    called: list[str] = []  # the MCP tools it calls (`always:` reads them next time)
    started_wall, transcript, sink = opened(p, decision, records, progress)
    started = time.monotonic()
    try:
        sample = records.sample(job, fresh=run.force) if sampled(run, p) else 0
        attempt = attempt_job(
            run, p, sink, taint, records.synced, sample, called, delegates=delegates
        )
    except Exception as e:  # it stops the run: close the job's records first
        abort(run, job, records, transcript, sink, started, started_wall, e)
        raise
    finally:
        if taint.source is not None:  # its daily-note quote stays out of system prompts
            read_outside(job)
    duration = round(time.monotonic() - started, 3)
    return conclude(
        run,
        p,
        fp,
        decision,
        records=records,
        transcript=transcript,
        sink=sink,
        attempt=attempt,
        duration=duration,
        started_wall=started_wall,
        called=called,
        tainted=taint.source,
    )


def opened(
    p: Prepared, decision: Decision, records: Recorder, progress: Progress
) -> tuple[dt.datetime, Transcript, JobSink]:
    """The job's row, transcript and event sink opened, and its start said: when it
    started, its transcript, its sink (here, or on a cluster: run.remotejob)."""
    job = p.job
    started_wall = records.start(job)
    transcript = records.transcript(job)
    sink = records.sink(job, transcript, progress)
    sink("start", job=job.name, task=job.task, item=job.item, reasons=decision.reasons)
    for note in p.cuts:  # the job still runs: the marker in its prompt tells the model
        sink("warning", message=note)
        progress.warn_once(f"claw: warning: {job.task}: {note}")
    progress.job_started(job)
    return started_wall, transcript, sink


def conclude(
    run: RunContext,
    p: Prepared,
    fp: Fingerprint,
    decision: Decision,
    *,
    records: Recorder,
    transcript: Transcript,
    sink: EventSink,
    attempt: Attempt,
    duration: float,
    started_wall: dt.datetime,
    called: list[str],
    tainted: str | None,
    node: str | None = None,
) -> JobResult:
    """What became of a job that ran (here, or on a cluster's `node`): its transcript
    closed, its result made and recorded."""
    job = p.job
    outcome, status, reason, error = ended(transcript, attempt, duration, run.redact)
    if status == "failed" and error and _all_replayed(sink):
        error += REPLAYED_FAILURE
    result = JobResult(
        job=job,
        status=status,
        reason=reason,
        duration_s=duration,
        output=outcome.output if outcome else None,
        error=run.redact(error) if error else None,
        transcript=records.shown(transcript),
        text=outcome.text if outcome else "",
        findings=tuple(run.redact(f) for f in _findings(outcome)),
        reasons=decision.reasons,
        **spent(sink),
        saved_tokens=sink.saved_tokens,
        saved_usd=sink.saved_usd,
        node=node,
    )
    if called:  # kept beside the fingerprint, not in its value
        fp = Fingerprint({**fp.parts, CALLED: sorted(set(called))})
    records.record(result, started_wall, p, fp, tainted)
    return result


def job_taint(run: RunContext, p: Prepared, run_id: str) -> JobTaint:
    """What the job has read from outside: what it reads before its model is called, and
    then what its tools read (claw_batch.taint.jobtaint)."""
    task, policy = p.task, p.policy
    # Where its commands may write: what a granted bash of a tainted job taints.
    dirs: tuple[str, ...] = ("",)
    if task.sandbox != "none" and "bash" in task.offered_tools:
        from claw_batch.sandbox.bubblewrap import write_dirs

        dirs = write_dirs(policy.write_globs, policy.outputs)
    # Its MCP tools by the names the model calls them: a read_only server's, and what
    # `untrusted.allow` grants, a tainted job keeps.
    return JobTaint(
        sources=p.tainted,
        files=run.tainted,
        allow=(*task.untrusted_allow, *p.mcp_kept),
        tools=(*task.offered_tools, *p.mcp),
        writer=Writer(p.job.task, p.job.item or "", run_id),
        bash_dirs=dirs,
    )


Attempt = tuple["Outcome | None", Status, "str | None", "str | None"]


# A failed job that paid for nothing: the call cache answered every turn as it did before.
REPLAYED_FAILURE = (
    " (every model turn replayed from the call cache, as the run before got them: "
    "`claw run -B` asks the model anew)"
)


def _all_replayed(sink: EventSink) -> bool:
    return bool(sink.saved_tokens) and not (sink.usage.prompt_tokens + sink.usage.completion_tokens)


def sampled(run: RunContext, p: Prepared) -> bool:
    """Whether the job's requests carry its sample index (-B moves it): when a stored reply
    could answer them — the call cache's, or a batch's journalled one."""
    mode = run.models.mode
    return run.models.caching or (not mode.replay and (p.task.batch or mode.batch))


def attempt_job(
    run: RunContext,
    p: Prepared,
    sink: EventSink,
    taint: JobTaint,
    synced: DirSyncs,
    sample: int,
    called: list[str] | None = None,
    *,
    delegates: Delegates | None = None,
    nesting: Nesting | None = None,
) -> Attempt:
    """(outcome, status, reason, error). What ends a job is caught here; what ends the run
    propagates. `taint` says at the end what the job read from outside; `synced` makes the
    output's rename durable (before the ledger records the job done: run.record); `sample`:
    the call cache's sample index of its requests."""
    try:
        outcome = _Execution(
            run, p, sink, taint, synced, sample, called, delegates=delegates, nesting=nesting
        ).run()
    except KeyboardInterrupt:
        return None, "interrupted", "interrupted", "interrupted (Ctrl-C or SIGTERM)"
    except LimitExceeded as e:
        return None, "limit", str(e).split(":")[0], str(e)
    except TaskFailed as e:
        return None, "failed", type(e).__name__, str(e)
    if outcome.verdict is not None and not outcome.verdict.get("ok"):
        return outcome, "failed", "check failed", str(outcome.verdict.get("summary", ""))
    return outcome, "ok", None, None


def ended(
    transcript: Transcript, attempt: Attempt, duration: float, redact: Callable[[str], str]
) -> Attempt:
    """The transcript's last event, and the transcript closed: a job whose transcript
    could not be written whole (a full disk) is not done."""
    _, status, reason, error = attempt
    shown = redact(error) if error else None
    transcript.event("end", status=status, reason=reason, error=shown, seconds=duration)
    try:
        transcript.close()
    except TaskFailed as e:
        if status == "ok":
            return None, "failed", "TaskFailed", str(e)
    return attempt


def abort(
    run: RunContext,
    job: Job,
    records: Recorder,
    transcript: Transcript,
    sink: EventSink,
    started: float,
    started_wall: dt.datetime,
    error: Exception,
) -> None:
    """The records of a job that an error ends with the run."""
    message = run.redact(str(error))
    transcript.event("end", status="error", error=message)
    with contextlib.suppress(TaskFailed):  # unwritable: the error in flight says more
        transcript.close()
    duration = round(time.monotonic() - started, 3)
    ended = JobResult(
        job=job,
        status="error",
        reason=type(error).__name__,
        duration_s=duration,
        usage=sink.usage,
        output=None,
        error=message,
        transcript=records.shown(transcript),
        cost_usd=sink.cost_usd,
        saved_tokens=sink.saved_tokens,
        saved_usd=sink.saved_usd,
    )
    records.ended(ended, started_wall)


def _findings(outcome: Outcome | None) -> tuple[str, ...]:
    if outcome is None or outcome.verdict is None:
        return ()
    return tuple(answers.findings_text(outcome.verdict))


class _Execution:
    """The tool loop, then the answer checked and written."""

    def __init__(
        self,
        run: RunContext,
        prepared: Prepared,
        sink: EventSink,
        taint: JobTaint,
        synced: DirSyncs,
        sample: int = 0,
        called: list[str] | None = None,
        *,
        delegates: Delegates | None = None,
        nesting: Nesting | None = None,
    ) -> None:
        self.delegates = delegates
        self.nesting = nesting
        self.called = [] if called is None else called
        self.ctx = run
        self.p = prepared
        self.on_event = sink
        self.before_call = sink.flush  # the turn so far goes to disk before each call
        self.taint = taint
        self.synced = synced
        self.sample = sample

    def run(self) -> Outcome:
        started = time.monotonic()
        p = self.p
        output_path = self._output_path()  # refuse a bad output before paying a model
        system = system_prompt(self.ctx, p.job, p.skills)  # now: with the latest daily notes
        # Redacted before the model sees them, as tool results are: a key a prompt shows (a
        # staged .env in the diff, a file read()) it could pass on reversed, past redaction.
        redact = self.ctx.redact
        prompt = redact(p.prompt)
        keys: tuple[
            Message, ...
        ] = ()  # cassettes and batch ids read them; the call cache the first
        models = self.ctx.models
        # A cassette replays whatever the daily notes say; the call cache asks anew when
        # their owner edited them (SystemPrompt.call_key).
        cassette = models.mode.record or models.mode.replay
        key_text = system.key_text if cassette else system.call_key
        if cassette or self._batch:
            keys = (
                Message("system", _redacted_key(redact, key_text)),
                Message("user", redact(self._key_prompt())),
            )
        elif models.caching:  # the task prompt as sent: a prompt that shows the time asks anew
            keys = (Message("system", _redacted_key(redact, key_text)),)
        loop = self._loop(started, keys)
        shown = _redacted(redact, system.text)
        self.on_event("system", content=shown)
        self.on_event("user", content=prompt)
        result = loop.run([Message("system", shown), Message("user", prompt)])
        return self._finish(result, output_path)

    def _key_prompt(self) -> str:
        nesting = self.nesting
        if nesting is not None and nesting.key_prompt is not None:
            return nesting.key_prompt
        return key_prompt(self.ctx, self.p)

    def _loop(self, started: float, key_messages: tuple[Message, ...]) -> ToolLoop:
        p, task, nesting = self.p, self.p.task, self.nesting
        llm, model_name = self.ctx.models.get(p.model, batch=self._batch)
        # A batch job waits for its batches: up to the provider's 24 h window, beyond its
        # timeout (--batch-wait bounds the run's wait).
        deadline = started + task.timeout + (BATCH_WINDOW if self._batch else 0.0)
        name = p.job.name
        budget = self._budget()
        if nesting is not None:  # a sub-job: within its parent's time and budget
            deadline, name = min(deadline, nesting.deadline), nesting.name
            budget = budget.within(nesting.budget)
        delegate = None
        if self.delegates is not None:
            delegate = self.delegates(p, budget, self.taint, deadline, self.on_event)
        tools = ToolContext(
            root=self.ctx.project.root,
            policy=p.policy,
            env=self._env(),
            deadline=deadline,
            bash_allow=_bash_allow(task),
            sandbox=None if task.sandbox == "none" else _sandbox(p.policy, task),
            workspace=self.ctx.workspace,
            today=self.ctx.now.date(),
            taint=self.taint,
            on_event=self.on_event,
            redact=self.ctx.redact,
            job=name,
            called=self.called,
            delegate=delegate,
        )
        settings = LoopSettings(
            model=model_name,
            temperature=task.temperature,
            max_steps=task.max_steps,
            deadline=deadline,
            timeout=task.timeout,
            job=name,
            key_messages=key_messages,
            sample=self.sample,
        )
        schema = p.schema
        # Its tools' code and validators (pydantic) are loaded while its first request is in
        # flight, not once the model calls the first of them.
        startup.soon(*(tool.load for tool in p.tools.values()))
        return ToolLoop(
            llm,
            p.tools,
            tools,
            settings,
            on_event=self.on_event,
            before_call=self.before_call,
            check_answer=answers.checker(schema) if schema is not None else None,
            budget=budget,
        )

    @property
    def _batch(self) -> bool:
        """Whether its model calls go through the provider's Batch API."""
        return self.p.task.batch or self.ctx.models.mode.batch

    def _env(self) -> dict[str, str]:
        """The job's own copy of its task's tool environment (prepare.TaskSame.env)."""
        return dict(self.p.env)

    def _budget(self) -> JobBudget:
        task = self.p.task
        if self.ctx.spend is not None:
            return self.ctx.spend.job(self.p.job.task, self.p.model, batch=self._batch)
        return JobBudget.tokens_only(task.budget.max_tokens if task.budget else None)

    def _output_path(self) -> Path | None:
        return checked_output(self.p.policy, self.p.output) if self.p.output else None

    def _finish(self, result: LoopResult, output_path: Path | None) -> Outcome:
        p = self.p
        text = answers.normalise(result.text) if p.schema is not None else result.text + "\n"
        # Redacted at the source: the output file, the ledger's copy and what downstream tasks
        # and the daily note see are one text, and none of them holds a key.
        text = self.ctx.redact(text)
        # What the job's tools made of its other outputs: checked as `output` was.
        missing = [o for o in p.outputs if not checked_output(p.policy, o).is_file()]
        if missing:
            raise TaskFailed(f"declared output(s) not created: {', '.join(missing)}")
        if output_path is not None:
            data = text.encode()
            try:  # into the folder that was checked, even if a symlink has replaced it since
                with self.taint.writing(str(p.output), data):  # tainted: recorded first
                    write_file(p.policy.root, output_path, str(p.output), data, synced=self.synced)
            except ToolError as e:
                raise TaskFailed(f"output {p.output}: {e}") from e
            except OSError as e:  # a full disk: the old file stays
                raise TaskFailed(f"output {p.output}: {e.strerror or e}") from e
        verdict = json.loads(text) if p.task.check else None
        return Outcome(text, result, p.output, verdict)


class _LastRedacted:
    """The last text redacted, with the redactor and the text it came from: the jobs of a
    task share one system prompt (agent.systemprompt hands out the same object while none of
    its files changes), so it is redacted once for them rather than once each. A Redactor's
    answer depends on the text alone."""

    def __init__(self) -> None:
        self._last: tuple[Callable[[str], str], str, str] | None = None

    def __call__(self, redact: Callable[[str], str], text: str) -> str:
        last = self._last
        if last is not None and last[0] is redact and last[1] is text:
            return last[2]
        shown = redact(text)
        self._last = (redact, text, shown)
        return shown


_redacted = _LastRedacted()  # the system prompts as sent
_redacted_key = _LastRedacted()  # their keys (placeholders for what changes between runs)


def _sandbox(policy: Policy, task: Task) -> Deferred:
    """Bubblewrap, with the task's limits, made when the job runs its first command."""

    def make() -> Bubblewrap:
        from claw_batch.sandbox import bubblewrap

        asked, default = task.limits, bubblewrap.Limits()
        limits = dataclasses.replace(
            default, memory=asked.memory or default.memory, disk=asked.disk or default.disk
        )
        return bubblewrap.for_job(policy, network=task.permissions.network, limits=limits)

    return Deferred("bubblewrap", make)


def _bash_allow(task: Task) -> tuple[str, ...] | bool:
    # Patterns come as a tuple: taken for a list, they read as `bash: true`.
    bash = task.permissions.bash
    return bash if isinstance(bash, bool) else tuple(bash)

"""Sub-jobs: what the `delegate` tool runs (claw_batch.tools.delegate).

`delegate(task=NAME, input={...})` runs a job of a task the parent's task lists in
`delegate.tasks`, its templates seeing `input`; `delegate(prompt=TEXT, tools=[...])` an
ad-hoc one with the parent's model and system prompt, a subset of the parent's tools (never
one it lacks), the parent's write globs and no output. Either is a job: prepared,
fingerprinted (a repeated identical delegation is up to date and answers from the ledger),
its model calls through the run's models (the call cache), sandboxed as its task says, its
own transcript and ledger row (`parent`: the parent job's name), counted in the daily note
under its parent's task; never in the run's results (the parent's model decides what a
failed sub-job means).

A sub-job's identity is its ledger task `NAME<digest>` (`parent-task<digest>` for an
ad-hoc one) with no item: a name no task can have (clawfile names take no '<') and nothing
that is ever read as a project file.

Limits: at most -j sub-jobs run at a time across the run (a job waiting for its own
sub-jobs lets its slot go, so nesting cannot deadlock); depth is at most the root task's
`delegate.max_depth`; a task already in the chain of ancestors is a cycle; a sub-job's
deadline is its parent's at the latest, and what it spends is its parent's too
(agent.budget.JobBudget.within). Taint flows both ways: a tainted parent's sub-job is tainted
from its start, and a sub-job that read outside content taints its parent, which gets the
answer fenced, and its error too when it fails (a check's summary, a schema error quote
what it wrote).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from claw_batch import cancel
from claw_batch.agent.budget import JobBudget
from claw_batch.clock import now_for_run
from claw_batch.errors import LimitExceeded, ToolError
from claw_batch.plan.fingerprint import Fingerprint, digest
from claw_batch.plan.jobs import Job
from claw_batch.run.context import RunCache, RunContext
from claw_batch.run.job import Nesting, abort, attempt_job, ended, job_taint, sampled
from claw_batch.run.jobsink import EventSink
from claw_batch.run.prepare import Prepared, fingerprint_of, prepare, task_same, tools_digest
from claw_batch.run.record import Recorder
from claw_batch.run.results import JobResult, spent
from claw_batch.store.state import Done, JobRecord
from claw_batch.taint.jobtaint import READ_ONLY, JobTaint
from claw_batch.terminal.progress import Progress
from claw_batch.tools.base import Delegate

KEY_LENGTH = 8  # hex digits of a sub-job's identity


def sub_name(task: str, key: str) -> str:
    """A sub-job's name in messages and the ledger's task column: `review-file<3f2a9c1d>`."""
    return f"{task}<{key}>"


class SubJobs:
    """The run's sub-jobs: what every Delegate of the run shares."""

    def __init__(
        self,
        run: RunContext,
        cache: RunCache,
        records: Recorder,
        progress: Progress,
        *,
        jobs: int,
        noted: Any = None,  # run.closeout.CloseOut: the daily note's entries
    ) -> None:
        self.run = run
        self.cache = cache
        self.records = records
        self.progress = progress
        self.noted = noted
        self.width = max(1, jobs)
        self.slots = threading.Semaphore(self.width)  # sub-jobs running, across the run
        self._lock = threading.Lock()
        self._same: dict[str, threading.Semaphore] = {}  # one identical delegation at a time
        # the waits for one: (the jobs from the waiting one's root down, the sub-job it waits for)
        self._waits: dict[int, tuple[tuple[str, ...], str]] = {}

    def __call__(
        self,
        p: Prepared,
        budget: JobBudget,
        taint: JobTaint,
        deadline: float,
        sink: EventSink,
    ) -> Delegate | None:
        """A root job's Delegate (run.job.Delegates); None when it has no delegate tool."""
        if "delegate" not in p.tools:
            return None
        chain = (p.job.task,)
        return Delegator(self, p, budget, taint, deadline, sink, chain, p.task.delegate.max_depth)

    @contextlib.contextmanager
    def identical(self, name: str, deadline: float, names: tuple[str, ...]) -> Iterator[None]:
        """While the sub-job `name` runs: an identical delegation (another parent's, in
        parallel) waits for it, then finds it up to date. A wait that would close a cycle
        (`name` is, through the sub-jobs it waits for, waiting for one of `names`: the jobs
        from the caller's root down, each running until the caller ends) is refused."""
        token = object()
        with self._lock:
            same = self._same.setdefault(name, threading.Semaphore(1))
            if self._waits_for(name, names):
                raise ToolError(
                    f"refused: sub-job {name} is running and waits, through its own sub-jobs, "
                    f"for this job ({' -> '.join(names)}): waiting for it would never end; do "
                    "this part yourself"
                )
            self._waits[id(token)] = (names, name)
        try:
            got = cancel.acquire(same, deadline)
        finally:
            with self._lock:
                del self._waits[id(token)]
        if not got:
            raise ToolError(f"sub-job {name}: an identical one still ran at this job's deadline")
        try:
            yield
        finally:
            same.release()

    def _waits_for(self, name: str, names: tuple[str, ...]) -> bool:
        """Whether the running sub-job `name`, or one under it, waits (on and on) for one of
        `names`; under self._lock."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            job = todo.pop()
            if job in names:
                return True
            if job in seen:
                continue
            seen.add(job)
            todo.extend(want for chain, want in self._waits.values() if job in chain)
        return False


class Delegator:
    """One job's Delegate: runs its sub-jobs."""

    def __init__(
        self,
        subs: SubJobs,
        parent: Prepared,
        budget: JobBudget,
        taint: JobTaint,
        deadline: float,
        sink: EventSink,
        chain: tuple[str, ...],
        max_depth: int,
        *,
        name: str | None = None,
        slot: Slot | None = None,
        ancestors: tuple[str, ...] = (),
    ) -> None:
        self.subs = subs
        self.parent = parent
        self.budget = budget
        self.taint = taint
        self.deadline = deadline
        self.sink = sink
        self.chain = chain  # the tasks from the root job down to this one
        self.max_depth = max_depth  # the root task's
        self.name = name or parent.job.name  # as the ledger's `parent` column names it
        self.names = (*ancestors, self.name)  # the jobs from the root job down to this one
        self.slot = slot  # a sub-job's: the one of the run's slots it holds
        self._lock = threading.Lock()
        self._waiting = 0  # its delegate calls under way (parallel ones: several)

    @property
    def width(self) -> int:
        """How many of a turn's calls run at once (tools.base.Delegate): the run's -j."""
        return self.subs.width

    # --- the tool's call -------------------------------------------------------------------

    def __call__(
        self,
        *,
        task: str | None,
        input: Mapping[str, Any],
        prompt: str | None,
        tools: tuple[str, ...] | None,
    ) -> str:
        depth = len(self.chain)
        if depth > self.max_depth:
            raise ToolError(
                f"refused: a sub-job at depth {depth} is deeper than delegate.max_depth "
                f"({self.max_depth}) of task '{self.chain[0]}'; do this part yourself"
            )
        if task is not None:
            cp, key = self._named(task, input)
            chain = (*self.chain, task)
        else:
            assert prompt is not None  # the tool takes one or the other
            cp, key = self._ad_hoc(prompt, tools)
            chain = (*self.chain, self.parent.job.task)
        name = sub_name(task or self.parent.job.task, key)
        if name in self.names:  # an ad-hoc sub-job asking for itself again
            path = " -> ".join((*self.names, name))
            raise ToolError(f"refused: this sub-job is one of this job's own ancestors ({path})")
        with self._waiting_for_it(), self.subs.identical(name, self.deadline, self.names):
            return self._run(cp, name, input, chain, prompt if task is None else None)

    def _named(self, task: str, input: Mapping[str, Any]) -> tuple[Prepared, str]:
        allowed = self.parent.task.delegate.tasks
        if task not in allowed:
            listed = ", ".join(allowed) or "none"
            raise ToolError(
                f"task '{task}' is not one this task may delegate to (its delegate.tasks: {listed})"
            )
        config = self.subs.run.project.config
        if task not in config.tasks:
            raise ToolError(f"task '{task}' is not in the clawfile")
        if task in self.chain:
            path = " -> ".join((*self.chain, task))
            raise ToolError(f"refused: delegating to '{task}' is a cycle ({path})")
        run, cache = self.subs.run, self.subs.cache
        cp = prepare(run, cache, Job(task), input=input)
        if self.taint.source is not None and not cp.tainted:  # tainted from its start
            same = task_same(run, cache, task)
            cp = dataclasses.replace(
                cp,
                tools=same.tainted_tools,
                tools_digest=same.digests[1],
                tainted=(*cp.tainted, self.taint.source),
            )
        elif self.taint.source is not None:
            cp = dataclasses.replace(cp, tainted=(*cp.tainted, self.taint.source))
        return cp, digest({"task": task, "input": dict(input)})[:KEY_LENGTH]

    def _ad_hoc(self, prompt: str, asked: tuple[str, ...] | None) -> tuple[Prepared, str]:
        p = self.parent
        mine = dict(p.tools)
        names = tuple(mine) if asked is None else tuple(dict.fromkeys(asked))
        lacking = [n for n in names if n not in mine]
        if lacking:
            raise ToolError(
                f"refused: {', '.join(lacking)}: an ad-hoc sub-job gets only tools this job "
                f"has ({', '.join(mine) or 'none'})"
            )
        source = self.taint.source
        if source is not None:  # a tainted parent's: read-only, and what its task grants
            names = tuple(n for n in names if n in READ_ONLY or n in p.task.untrusted_allow)
        tools = {n: mine[n] for n in names}
        task = dataclasses.replace(p.task, check=False, json_schema=None, output=None, outputs=())
        cp = dataclasses.replace(
            p,
            task=task,
            prompt=prompt,
            variables={},
            output=None,
            outputs=(),
            schema=None,
            policy=dataclasses.replace(p.policy, outputs=()),  # the write globs, no outputs
            tools=tools,
            inputs=(),
            tainted=(source,) if source is not None else (),
            cuts=(),
            tools_digest=tools_digest(tools),
            mcp=tuple(n for n in p.mcp if n in tools),
            mcp_kept=tuple(n for n in p.mcp_kept if n in tools),
        )
        key = digest({"task": p.job.task, "prompt": prompt, "tools": sorted(tools)})
        return cp, key[:KEY_LENGTH]

    @contextlib.contextmanager
    def _waiting_for_it(self) -> Iterator[None]:
        """While this job waits for a sub-job it holds none of the run's slots (so -j 1
        with nested sub-jobs cannot deadlock): the first call lets go, the last takes back."""
        with self._lock:
            self._waiting += 1
            first = self._waiting == 1
        if first and self.slot is not None:
            self.slot.release()
        try:
            yield
        finally:
            with self._lock:
                self._waiting -= 1
                last = self._waiting == 0
            if last and self.slot is not None and not self.slot.take(self.deadline):
                raise LimitExceeded("timeout: no slot free for this sub-job before its deadline")

    # --- the sub-job -----------------------------------------------------------------------

    def _run(
        self,
        cp: Prepared,
        name: str,
        input: Mapping[str, Any],
        chain: tuple[str, ...],
        ad_hoc: str | None,
    ) -> str:
        subs, records = self.subs, self.subs.records
        needs = subs.run.project.config.tasks[cp.job.task].needs  # what needs.X shows it
        fp = fingerprint_of(cp, records.hashes.hash, subs.cache.outputs_of(needs))
        fp = Fingerprint({**fp.parts, "input": digest(dict(input))})
        ledger = Job(name)
        known = self._up_to_date(ledger, cp, fp)
        if known is not None:
            self._said(name, "up-to-date", None, known.tainted)
            return self._answer(name, known.result, known.tainted)
        slot = Slot(subs.slots)
        if not slot.take(self.deadline):
            raise ToolError(f"sub-job {name}: no slot free before this job's deadline")
        try:
            result, tainted = self._execute(cp, ledger, fp, chain, ad_hoc, slot)
        finally:
            slot.release()
        self._said(name, result.status, result.transcript, tainted, result)
        if result.status == "interrupted":
            raise KeyboardInterrupt
        if result.status != "ok":
            failed = f"sub-job {name} ended {result.status}: {result.error or ''}"
            if tainted is not None:  # its error quotes what it wrote: fenced as its answer
                raise ToolError(
                    self.taint.fenced(failed, f"sub-job {name} ({tainted})"), fenced=True
                )
            raise ToolError(failed)
        return self._answer(name, result.text, tainted)

    def _up_to_date(self, ledger: Job, cp: Prepared, fp: Fingerprint) -> Done | None:
        """The last success of an identical delegation whose outputs are as it left them."""
        subs = self.subs
        state = subs.records.state
        if state is None or subs.run.force:
            return None
        done = state.done(ledger.task, "")
        if done is None or done.fingerprint != fp.value:
            return None
        hashes = subs.records.hashes
        if any(hashes.hash(path) != h for path, h in done.outputs.items()):
            return None
        return done

    def _answer(self, name: str, text: str, tainted: str | None) -> str:
        """The sub-job's answer as the parent gets it: fenced, and the parent tainted, when
        the sub-job read outside content."""
        text = text.removesuffix("\n")  # as the output file ends it
        if tainted is None:
            return text
        return self.taint.fenced(text, f"sub-job {name} ({tainted})")

    def _said(
        self,
        name: str,
        status: str,
        transcript: str | None,
        tainted: str | None,
        ran: JobResult | None = None,
    ) -> None:
        """The `delegate` event in the parent's transcript (claw show nests the sub-job);
        what a sub-job that `ran` spent (with its own sub-jobs) is its parent's too."""
        paid: dict[str, object] = {}
        if ran is not None:
            u = ran.usage
            usage = {"prompt": u.prompt_tokens, "completion": u.completion_tokens}
            paid = {"usage": {**usage, "cached": u.cached_tokens}, "cost_usd": ran.cost_usd}
        with self._lock:  # parallel calls end on their threads
            self.sink(
                "delegate",
                job=name,
                status=status,
                transcript=transcript,
                **({"tainted": tainted} if tainted else {}),
                **paid,
            )

    def _execute(
        self,
        cp: Prepared,
        ledger: Job,
        fp: Fingerprint,
        chain: tuple[str, ...],
        ad_hoc: str | None,
        slot: Slot,
    ) -> tuple[JobResult, str | None]:
        """Run the sub-job as run.job.run_job runs a job, under this one."""
        subs = self.subs
        run, records = subs.run, subs.records
        assert records.state is not None
        taint = job_taint(run, dataclasses.replace(cp, job=ledger), records.run_id)
        started_wall = now_for_run(records.environ)
        state = records.state
        state.start_sub_job(records.run_id, ledger.task, started_wall.isoformat(), self.name)
        transcript = records.transcript(ledger)
        sink = records.sink(ledger, transcript, subs.progress)
        sink("start", job=ledger.name, task=cp.job.task, item=None, parent=self.name, reasons=[])
        started = time.monotonic()
        nesting = Nesting(ledger.name, self.deadline, self.budget, ad_hoc)

        def delegates(
            p: Prepared, budget: JobBudget, t: JobTaint, deadline: float, s: EventSink
        ) -> Delegate | None:
            if "delegate" not in p.tools:
                return None
            return Delegator(
                subs, p, budget, t, deadline, s, chain, self.max_depth,
                name=ledger.name, slot=slot, ancestors=self.names,
            )  # fmt: skip

        try:
            sample = records.sample(ledger, fresh=run.force) if sampled(run, cp) else 0
            attempt = attempt_job(
                run, cp, sink, taint, records.synced, sample, delegates=delegates, nesting=nesting
            )
        except Exception as e:  # it stops the run: close the sub-job's records first
            abort(run, ledger, records, transcript, sink, started, started_wall, e)
            raise
        duration = round(time.monotonic() - started, 3)
        outcome, status, reason, error = ended(transcript, attempt, duration, run.redact)
        tainted = taint.source
        result = JobResult(
            job=ledger,
            status=status,
            reason=reason,
            duration_s=duration,
            output=outcome.output if outcome else None,
            error=run.redact(error) if error else None,
            transcript=records.shown(transcript),
            text=outcome.text if outcome else "",
            **spent(sink),
            saved_tokens=sink.saved_tokens,
            saved_usd=sink.saved_usd,
        )
        self._record(result, started_wall.isoformat(), cp, fp, tainted)
        if subs.noted is not None:
            subs.noted.sub_job(self.chain[0], result, tainted is not None)
        return result, tainted

    def _record(
        self, r: JobResult, started: str, cp: Prepared, fp: Fingerprint, tainted: str | None
    ) -> None:
        records = self.subs.records
        state = records.state
        assert state is not None
        row = dataclasses.replace(
            JobRecord.of(records.run_id, r.job.task, "", started, r), parent=self.name
        )
        if r.status != "ok":
            state.finish_job(row)
            return
        outputs = {
            path: records.hashes.hash_written(path, r.text.encode())
            if path == r.output
            else records.hashes.hash(path)
            for path in cp.declared_outputs
        }
        written = {path: h for path, h in outputs.items() if h is not None}
        done = Done.of(r.job.task, "", fp.value, fp.parts, written, r.text, None, tainted)
        state.succeed_job(row, done, records.synced.sync)


class Slot:
    """One of the run's sub-job slots, as one sub-job holds it: let go while it waits for
    its own sub-jobs, taken back after; released once."""

    def __init__(self, slots: threading.Semaphore) -> None:
        self.slots = slots
        self.held = False

    def take(self, deadline: float) -> bool:
        """False at the deadline; Ctrl-C ends the wait."""
        self.held = cancel.acquire(self.slots, deadline)
        return self.held

    def release(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()

"""The up-to-date check (SPEC §4): whether a job must run, decided by one Decider per run.

A job whose task is keyed and whose seal still holds is up to date by stat keys alone (the
quick check, claw_batch.plan.quickcheck). Any other job is prepared, and its fingerprint
(claw_batch.plan.fingerprint) and outputs are compared with its last success: it runs when
one of them changed, and says which (`claw why`); an output edited by hand is kept.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from claw_batch.config import Task
from claw_batch.plan.fingerprint import CALLED, Fingerprint
from claw_batch.plan.graph import Graph
from claw_batch.plan.halves import pays, shared
from claw_batch.plan.jobs import Items, Job, items_of
from claw_batch.plan.quickcheck import TaskKey, first_outputs, keyed
from claw_batch.store.filehash import FileHashes
from claw_batch.store.lastrun import LastRun, last_runs
from claw_batch.store.state import Done, State

# How a reason for not running says that an output edited by hand is kept.
KEPT = "was modified by hand; kept (-B overwrites it)"
# Why a job with no last success runs when the ledger has no run of it either.
NEVER_RAN = "never ran (or did not finish)"
FORCED = "forced (-B)"
ALWAYS = "always: true"


@dataclass(frozen=True, slots=True)  # one per job: 100,000 in a large run
class Decision:
    run: bool
    reasons: tuple[str, ...]  # why it runs; or, when it does not, what the user should know
    modified: tuple[str, ...] = ()  # outputs edited by hand since claw wrote them
    # A job that need not run: its last success, when it was read (the quick check of a job
    # no task reads after it needs none); its outputs' hashes now (None: as recorded); and
    # the output its result names.
    done: Done | None = None
    outputs: Mapping[str, str | None] | None = None
    output: str | None = None

    @property
    def status(self) -> Literal["up-to-date", "modified"]:
        """What a job that need not run is."""
        return "modified" if self.modified else "up-to-date"


class Candidate(Protocol):
    """A job as the full check reads it, prepared only when asked: the quick check reads
    none of it (claw_batch.run.session.Preparation)."""

    @property
    def fingerprint(self) -> Fingerprint: ...

    def output_hash(self, rel: str) -> str | None:
        """An output's hash now (None: missing, or where the job may not write)."""
        ...


class Decider:
    """Whether each job of one run must run; asked once per job, in dependency order. A dry
    run remembers the tasks that would run: the tasks that need them would run too."""

    def __init__(
        self,
        state: State | None,
        hashes: FileHashes,
        graph: Graph,
        tasks: Mapping[str, Task],
        *,
        key: Callable[[str], TaskKey],  # a keyed task's key
        force: bool = False,
        dry_run: bool = False,
    ) -> None:
        self.state = state
        self.hashes = hashes
        self.graph = graph
        self.tasks = tasks
        self.key_of = key
        self.force = force
        self.dry_run = dry_run
        self._rows: dict[str, list[tuple[str, str | None]]] = {}  # see seal_rows()
        # Per task settled by settle_task(): its jobs and their outputs; or the tasks where
        # that check did not hold.
        self._settled: dict[str, tuple[Sequence[Job], Sequence[str | None]]] = {}
        self._unsettled: set[str] = set()
        self._sealed: dict[str, dict[str, str | None]] = {}  # see sealed()
        self.keys: dict[str, TaskKey | None] = {}  # per task, for the quick check
        self.pending: set[str] = set()  # dry run: tasks that would run
        self.quick_updates: list[tuple[str, str, str]] = []  # (quick, task, item)
        self.last: dict[str, dict[str, LastRun]] = {}  # per task: how its jobs last ended

    def sealed_output(self, job: Job) -> str | Literal[False] | None:
        """The quick check of a job no task after it reads: while its seal holds, the output
        its result names (None: none); False when it takes `decide`. A no-op asks it of
        every job, before anything is made for the job (claw_batch.run.session)."""
        outputs = self.sealed_outputs(job.task, [job])
        # When it does not hold, decide() stats it again: the full check that follows dwarfs it
        return False if outputs is None else outputs[0]

    def settle_task(self, task: str, jobs_of: Callable[[], Sequence[Job]]) -> Sequence[Job] | None:
        """The jobs of a large task as the ledger has them, when the quick check holds for
        every one and its listing (`jobs_of`), made meanwhile by the forked half of that
        check (claw_batch.plan.halves), finds the same items, or the same but for items
        removed since they ran (their files gone): a no-op's listing is then off this
        process's path, and its jobs are made only when read. None: list the jobs and check
        them as ever (`sealed_outputs` then answers from this check)."""
        seals = self.seal_rows(task)
        if not pays(len(seals)) or task in self._settled or task in self._unsettled:
            return None
        key = self.task_key(task)
        if key is None or self.graph.dependents(task):
            return None
        items = [item for item, _ in seals]
        listing = _Listing(items, jobs_of)
        missing: list[int] = []  # this process's jobs whose item is gone

        def gone(i: int) -> bool:
            if listing.removed is not None:  # the child, which listed them
                return i in listing.removed
            missing.append(i)  # to be found in what the child says was removed
            return True

        holds = key.holds(seals, items, self.hashes.stamp, gone, self.hashes.stamp_pair)
        said = shared(holds, len(seals), listing)
        removed = set(_unpack(said)) if said else set()
        if said is None or not removed.issuperset(missing):
            self._unsettled.add(task)
            return None
        outputs: Sequence[str | None] = first_outputs(seals)
        if removed:
            kept = [i for i in range(len(seals)) if i not in removed]
            items, outputs = [items[i] for i in kept], [outputs[i] for i in kept]
        jobs = Items(task, items)
        self._settled[task] = (jobs, outputs)
        return jobs

    def sealed_outputs(self, task: str, jobs: Sequence[Job]) -> Sequence[str | None] | None:
        """`sealed_output` of jobs of one task at once: the output each one's result names
        when every seal holds; None as soon as one does not."""
        settled = self._settled.get(task)
        if settled is not None and jobs is settled[0]:
            return settled[1]
        seals = self.seal_rows(task)
        if len(seals) != len(jobs):  # items came or went since: their seals, by name
            sealed = self.sealed(task)
            seals = [(job.item or "", sealed.get(job.item or "")) for job in jobs]
            if not all(seal for _, seal in seals):
                return None
        elif task in self._unsettled and all(
            job.item == item for job, (item, _) in zip(jobs, seals, strict=True)
        ):
            return None  # the jobs settle_task checked, and one did not hold
        key = self.task_key(task)
        if key is None or self.graph.dependents(task):
            return None
        items = items_of(jobs)
        return key.all_unchanged(seals, items, self.hashes.stamp, self.hashes.stamp_pair)

    def seal_rows(self, task: str) -> list[tuple[str, str | None]]:
        """The task's jobs with a last success and their quick seals (None: none), in the
        order of their items; read from the ledger when the task is first checked, before
        any of its jobs runs."""
        if task not in self._rows:
            self._rows[task] = self.state.sealed(task) if self.state else []
        return self._rows[task]

    def sealed(self, task: str) -> dict[str, str | None]:
        """`seal_rows`, by item."""
        if task not in self._sealed:
            self._sealed[task] = dict(self.seal_rows(task))
        return self._sealed[task]

    def decide(self, job: Job, candidate: Candidate) -> Decision:
        seals = self.sealed(job.task)
        if (job.item or "") not in seals:  # it never succeeded: it runs, whatever its fingerprint
            return self._unsealed(job)
        sealed = seals[job.item or ""]  # None: its last success has no quick seal
        key = self.task_key(job.task)
        if key and sealed and key.unchanged(sealed, job.item, self.hashes.stamp):
            if not self.graph.dependents(job.task):  # no task after it reads its record
                return Decision(False, (), output=TaskKey.first_output(sealed))
            return _kept(Decision(False, ()), self.last_success(job), None)
        done = self.last_success(job)
        if done is None:
            return self._unsealed(job)
        fp = candidate.fingerprint
        outputs = {o: candidate.output_hash(o) for o in done.outputs}
        decision = self._full(job, done, fp, outputs)
        if decision.run:
            if self.dry_run:
                self.pending.add(job.task)
            return decision
        if key and not decision.modified and not self.dry_run:
            quick = self.seal(job, fp, list(outputs))
            if quick is not None and quick != done.quick:
                self.quick_updates.append((quick, job.task, job.item or ""))
        return _kept(decision, done, outputs)

    def task_key(self, task: str) -> TaskKey | None:
        """The task's key for the quick check, once per run; None: every job of it takes
        the full check (-B, an upstream that would run, templates that read the clock...)."""
        if task not in self.keys:
            pending = any(n in self.pending for n in self.graph.upstream(task))
            eligible = not (self.force or pending) and keyed(self.tasks[task])
            self.keys[task] = self.key_of(task) if eligible else None
        return self.keys[task]

    def seal(self, job: Job, fp: Fingerprint, outputs: list[str]) -> str | None:
        """What the quick check compares next time, from the stat keys the job's item and
        outputs had when they were hashed for this fingerprint; None: it takes the full
        check."""
        key = self.task_key(job.task)
        if key is None:
            return None
        if job.item in outputs or not key.shared.keys().isdisjoint(outputs):
            return None  # a job that rewrites what it reads: its inputs' stats are not its own
        stamp = self.hashes.hashed_stamp([job.item, *outputs] if job.item else outputs)
        return key.seal(fp, stamp, outputs)

    def save(self) -> None:
        """The seals of the jobs the full check found up to date, for the next run."""
        if self.state is not None:
            self.state.set_quick(self.quick_updates)

    def last_success(self, job: Job) -> Done | None:
        """The job's last success, from the ledger."""
        if self.state is None or (job.item or "") not in self.sealed(job.task):
            return None
        return self.state.done(job.task, job.item or "")

    def _unsealed(self, job: Job) -> Decision:
        """A job with no last success runs: the full check's reasons, without its
        fingerprint (the job is prepared only to run, or for `claw plan`)."""
        decision = self._pending(job)
        if decision is None and self.force:
            decision = Decision(True, (FORCED,))
        elif decision is None and self.tasks[job.task].always is True:
            decision = Decision(True, (ALWAYS,))
        elif decision is None:
            decision = Decision(True, (self.no_success(job),))
        if self.dry_run:
            self.pending.add(job.task)
        return decision

    def _pending(self, job: Job) -> Decision | None:
        """A dry run's job after an upstream that would run: it would run too."""
        pending = [n for n in self.graph.upstream(job.task) if n in self.pending]
        if pending:
            return Decision(True, tuple(f"upstream {n} would run" for n in pending))
        return None

    def _full(
        self, job: Job, done: Done, fp: Fingerprint, outputs: Mapping[str, str | None]
    ) -> Decision:
        pending = self._pending(job)
        if pending is not None:
            return pending
        always = self.tasks[job.task].always
        return decide(done, fp, outputs, force=self.force, always=always)

    def no_success(self, job: Job) -> str:
        """Why a job with no last success runs: how it last ended (`failed in run X at T:
        check failed: ...`), once per task a query; else that it never ran."""
        if self.state is None:
            return NEVER_RAN
        if job.task not in self.last:
            self.last[job.task] = last_runs(self.state, job.task)
        last = self.last[job.task].get(job.item or "")
        return (last.describe() if last else None) or NEVER_RAN


class _Listing:
    """What the forked half of `Decider.settle_task` asks first: the task's listing, which
    must be its sealed `items` but for some removed (their positions, packed); None when it
    is not."""

    def __init__(self, items: list[str], jobs_of: Callable[[], Sequence[Job]]) -> None:
        self.items = items
        self.jobs_of = jobs_of
        self.removed: frozenset[int] | None = None  # once listed

    def __call__(self) -> bytes | None:
        listed = list(items_of(self.jobs_of()))
        if listed == self.items:
            self.removed = frozenset()
            return b""
        there = set(listed)
        if [item for item in self.items if item in there] != listed:
            return None  # an item with no seal
        removed = [i for i, item in enumerate(self.items) if item not in there]
        self.removed = frozenset(removed)
        return struct.pack(f"={len(removed)}I", *removed)


def _unpack(positions: bytes) -> tuple[int, ...]:
    return struct.unpack(f"={len(positions) // 4}I", positions)


def _kept(
    decision: Decision, done: Done | None, outputs: Mapping[str, str | None] | None
) -> Decision:
    assert done is not None  # only a job that succeeded before is not run
    output = next(iter(done.outputs), None)
    return dataclasses.replace(decision, done=done, outputs=outputs, output=output)


def decide(
    done: Done | None,
    fp: Fingerprint,
    outputs_now: Mapping[str, str | None],
    *,
    force: bool = False,
    always: bool | tuple[str, ...] = False,
) -> Decision:
    """Whether a job must run by the full check. `outputs_now` maps each output recorded at
    its last success to the file's current hash (None when missing). `always`: True, or the
    MCP tools (mcp.S.T patterns) whose answers change: a job whose last run called one runs."""
    if force:
        return Decision(True, (FORCED,))
    if always is True:
        return Decision(True, (ALWAYS,))
    if done is None:
        return Decision(True, (NEVER_RAN,))
    called = _called(done, always) if always else []
    if called:
        return Decision(True, (f"always: its last run called {', '.join(called)}",))
    missing = [p for p, h in outputs_now.items() if h is None]
    modified = tuple(p for p, h in outputs_now.items() if h is not None and h != done.outputs[p])
    changes = explain(done.parts, fp.parts) if done.fingerprint != fp.value else []
    if modified:
        kept = [f"output {p} {KEPT}" for p in modified]
        return Decision(False, (*kept, *changes), modified)
    reasons = [f"output {p} is missing" for p in missing] + changes
    return Decision(bool(reasons), tuple(reasons))


def _called(done: Done, always: tuple[str, ...]) -> list[str]:
    """The MCP tools the job's last success called that `always:` names."""
    from claw_batch.mcp import names

    called = done.parts.get(CALLED) or []
    return [c for c in called if names.matches(always, *names.split(c))]


def explain(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    reasons = [
        f"{label} changed"
        for name, label in (("task", "task definition"), ("prompt", "prompt"))
        if old.get(name) != new.get(name)
    ]
    reasons += _system(old, new)
    if old.get("tools") != new.get("tools"):
        reasons.append("tools or permissions changed")
    if old.get("model") != new.get("model"):
        reasons.append(f"model changed ({old.get('model')} -> {new.get('model')})")
    reasons += _files("input", old.get("inputs", {}), new.get("inputs", {}))
    reasons += _files("upstream output", old.get("upstream", {}), new.get("upstream", {}))
    return reasons or ["fingerprint changed"]


def _system(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What changed of the system prompt: its workspace files, and its skills by name."""
    system = old.get("system") != new.get("system")
    if "skill_files" not in old:  # a last success recorded before they were kept
        return [
            *(["context (workspace files or skills list) changed"] if system else []),
            *(["skill files changed"] if old.get("skills") != new.get("skills") else []),
        ]
    reasons = []
    if old.get("context") != new.get("context"):
        reasons.append("context (workspace files) changed")
    changed = _skills(old["skill_files"], new.get("skill_files", {}))
    if changed:
        reasons.append(f"skills changed: {', '.join(changed)}{_cost(old, new)}")
    elif system and not reasons:
        reasons.append("skills list changed")  # the same skills, shown from another folder
    return reasons


def _skills(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """`+pdf` added, `-docx` removed, `pdf edited` (a file in its folder changed)."""
    out = []
    for name in sorted(old.keys() | new.keys()):
        if name not in old:
            out.append(f"+{name}")
        elif name not in new:
            out.append(f"-{name}")
        elif old[name] != new[name]:
            out.append(f"{name} edited")
    return out


def _cost(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What the skills list adds to every model call now, against the last success's."""
    change = new.get("skills_tokens", 0) - old.get("skills_tokens", 0)
    if not change or "skills_tokens" not in old:
        return ""
    more = "more" if change > 0 else "fewer"
    return f" (~{abs(change):,} {more} prompt tokens per model call)"


def _files(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out = []
    for path in sorted(old.keys() | new.keys()):
        if path not in old:
            out.append(f"{kind} {path} added")
        elif path not in new or new[path] is None:
            out.append(f"{kind} {path} removed")
        elif old[path] != new[path]:
            out.append(f"{kind} {path} changed")
    return out

"""`claw run`: plan the jobs, skip what is up to date, run the rest through the tool loop,
record what happened."""

from __future__ import annotations

import datetime as dt
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from claw_batch import cancel
from claw_batch.clock import new_run_id, now_for_run
from claw_batch.config import Project
from claw_batch.endpoints import Mode, Models, api_keys
from claw_batch.errors import ClawError, Interrupted, LimitExceeded, Locked, TaskFailed
from claw_batch.graph import Graph, build
from claw_batch.jobs import Job, expand, select_tasks
from claw_batch.lock import ProjectLock
from claw_batch.progress import Progress
from claw_batch.redact import Redactor, secrets_from_env
from claw_batch.results import JobResult
from claw_batch.schedule import describe_due, due
from claw_batch.session import RUN_STATUS, RunSession
from claw_batch.slots import Entry, Slots
from claw_batch.state import State


@dataclass(frozen=True)
class RunOptions:
    targets: tuple[str, ...] = ()
    keep_going: bool = False
    jobs: int = 1  # -j: jobs at a time
    force: bool = False
    dry_run: bool = False
    files: tuple[str, ...] = ()
    model: str | None = None
    mode: Mode = field(default_factory=Mode)
    argv: tuple[str, ...] = ()
    wait: bool = False  # another run holds the project: wait instead of exiting 75
    due: bool = False  # only scheduled tasks whose latest slot has not run (claw run --due)
    hook: str | None = None  # the git hook this run serves: its tools cannot commit or stash
    only: tuple[Job, ...] = ()  # claw watch: these jobs of their tasks, not every match


@dataclass
class RunSummary:
    run_id: str
    results: list[JobResult] = field(default_factory=list)
    exit_code: int = 0
    error: str | None = None  # what stopped the run early (a replay miss, a template error)


def exit_code(results: Sequence[JobResult]) -> int:
    statuses = {r.status for r in results}
    if "interrupted" in statuses:
        return Interrupted.exit_code
    if "failed" in statuses:
        return TaskFailed.exit_code
    if "limit" in statuses:
        return LimitExceeded.exit_code
    return 0


class Runner:
    def __init__(
        self,
        project: Project,
        options: RunOptions,
        *,
        progress: Progress,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.project = project
        self.options = options
        self.progress = progress
        self.environ = dict(os.environ if environ is None else environ)
        secrets = [*api_keys(project.config, self.environ), *secrets_from_env(self.environ)]
        self.redact = Redactor(secrets)
        self.models = Models(project.config, self.environ, options.mode, redact=self.redact)
        self.graph: Graph = build(project.config)

    def tasks(self) -> list[str]:
        """The selected tasks and everything they depend on, each after its upstream. With
        --due: the scheduled ones among the targets (all of them without targets), not yet
        in order — which of them run is decided under the lock."""
        config = self.project.config
        if self.options.due:
            chosen = (
                select_tasks(config, self.options.targets) if self.options.targets else config.tasks
            )
            return [name for name in chosen if config.tasks[name].schedule]
        return self.graph.order(select_tasks(config, self.options.targets))

    def plan(self) -> list[Job]:
        """The jobs as they are now; a fan-out over an upstream's outputs is expanded again
        when its turn comes, after the upstream ran."""
        return [job for name in self.tasks() for job in self.jobs_of(name)]

    def jobs_of(self, name: str) -> list[Job]:
        """The task's jobs; in a run for `claw watch`, the files it hands over."""
        only = [job for job in self.options.only if job.task == name]
        return only or expand(self.project.config, self.project.root, name)

    def run(self, then: Callable[[RunSummary], None] | None = None) -> RunSummary:
        """Run the planned jobs under the project lock, and `then` with the summary before
        the lock is let go. Errors that stop the run (the lock, a replay miss, a template
        error, Ctrl-C) end up in the summary; only a bug propagates."""
        names = self.tasks()  # an unknown target is a usage error before anything is written
        if self.options.dry_run:  # read-only: no lock, never in a running run's way
            return self._run(names)
        lock = ProjectLock(
            self.project.root,
            wait=self.options.wait,
            argv=" ".join(["claw", *self.options.argv[1:]]),
            on_wait=lambda held: self.progress.message(f"claw: {held}; waiting"),
        )
        try:
            with lock:
                summary = self._run(names)
                if then is not None:
                    then(summary)
                return summary
        except Locked as e:  # nothing ran and nothing was written: no ledger entry
            return RunSummary("", exit_code=e.exit_code, error=str(e))

    def _run(self, names: list[str]) -> RunSummary:
        cancel.reset()
        now = now_for_run(self.environ)
        summary = RunSummary("" if self.options.dry_run else new_run_id(now))
        try:
            state = self._open_state()
        except ClawError as e:  # a ledger that cannot be written (a full disk): nothing ran
            summary.exit_code, summary.error = e.exit_code, str(e)
            return summary
        due_slots: list[Entry] = []
        if self.options.due:
            slots = Slots(state, readonly=self.options.dry_run)
            due_slots = self._due(slots, names, now, summary.run_id)
            names = self.graph.order([e.task for e in due_slots if e.due.run])
            if not names:  # nothing to run: no run in the ledger, nothing printed
                if state is not None:
                    state.close()
                return summary
        run = RunSession(self, state, summary, now)
        summary.exit_code = 1  # what the ledger says if a bug ends the run
        try:
            run.tasks(names)
            summary.exit_code = exit_code(self._counted(summary.results))
        except ClawError as e:
            summary.exit_code, summary.error = e.exit_code, self.redact(str(e))
        except KeyboardInterrupt:
            summary.exit_code, summary.error = Interrupted.exit_code, "interrupted"
        finally:
            if due_slots and not self.options.dry_run:
                self._finish_slots(slots, due_slots, summary)
            run.close()
        return summary

    def _due(self, slots: Slots, names: list[str], now: dt.datetime, run_id: str) -> list[Entry]:
        """Each scheduled task's latest slot that needs something: to run, or to be recorded
        as missed. Recorded before anything runs (not in a dry run)."""
        entries = []
        for name in names:
            task = self.project.config.tasks[name]
            assert task.schedule is not None
            found = due(
                task.schedule,
                task.tz,
                now,
                seen=functools.partial(slots.seen, name),
                last=slots.last(name),
                catch_up=task.catch_up,
            )
            if found is not None:
                entries.append(Entry(name, found))
        for e in entries:
            self.progress.message(describe_due(e.task, e.due))
        if entries and not self.options.dry_run:
            slots.record(entries, run_id, now)
        return entries

    def _finish_slots(self, slots: Slots, due: list[Entry], summary: RunSummary) -> None:
        for e in due:
            if not e.due.run:
                continue
            results = [r for r in summary.results if r.job.task == e.task]
            code = exit_code(results) if results else summary.exit_code or Interrupted.exit_code
            slots.finish(e.task, e.due.slot.name, RUN_STATUS.get(code, "error"))

    def _counted(self, results: list[JobResult]) -> list[JobResult]:
        """The results that decide the exit code: with `on_error: warn`, a job that failed
        because the model could not be reached (or did not answer in time) only warns."""
        counted = []
        for r in results:
            unreachable = r.reason == "ModelError" or (r.reason or "").startswith("timeout")
            if unreachable and self.project.config.tasks[r.job.task].on_error == "warn":
                self.progress.message(
                    f"claw: {r.job.name}: {r.error or r.reason}; on_error: warn, so it does "
                    "not fail the run"
                )
                continue
            counted.append(r)
        return counted

    def _open_state(self) -> State | None:
        path = self.project.root / ".claw" / "state.db"
        if self.options.dry_run:
            try:
                return State(path, readonly=True) if path.exists() else None
            except ClawError as e:  # corrupt: the next run starts afresh, and so does the plan
                self.progress.message(f"claw: {e}")
                return None
        state = State(path, recover=True)  # under the project lock
        if state.recovered:
            self.progress.message(f"claw: {state.recovered}")
        return state

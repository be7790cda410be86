"""`claw run`: plan the jobs, skip what is up to date, run the rest through the tool loop,
record what happened."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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
from claw_batch.session import RunSession
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
        """The selected tasks and everything they depend on, each after its upstream."""
        return self.graph.order(select_tasks(self.project.config, self.options.targets))

    def plan(self) -> list[Job]:
        """The jobs as they are now; a fan-out over an upstream's outputs is expanded again
        when its turn comes, after the upstream ran."""
        root = self.project.root
        return [job for name in self.tasks() for job in expand(self.project.config, root, name)]

    def run(self) -> RunSummary:
        """Run the planned jobs under the project lock. Errors that stop the run (the lock,
        a replay miss, a template error, Ctrl-C) end up in the summary; only a bug
        propagates."""
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
                return self._run(names)
        except Locked as e:  # nothing ran and nothing was written: no ledger entry
            return RunSummary("", exit_code=e.exit_code, error=str(e))

    def _run(self, names: list[str]) -> RunSummary:
        cancel.reset()
        now = now_for_run(self.environ)
        summary = RunSummary("" if self.options.dry_run else new_run_id(now))
        state = self._open_state()
        run = RunSession(self, state, summary, now)
        summary.exit_code = 1  # what the ledger says if a bug ends the run
        try:
            run.tasks(names)
            summary.exit_code = exit_code(summary.results)
        except ClawError as e:
            summary.exit_code, summary.error = e.exit_code, self.redact(str(e))
        except KeyboardInterrupt:
            summary.exit_code, summary.error = Interrupted.exit_code, "interrupted"
        finally:
            run.close()
        return summary

    def _open_state(self) -> State | None:
        path = self.project.root / ".claw" / "state.db"
        if self.options.dry_run:
            return State(path, readonly=True) if path.exists() else None
        return State(path)

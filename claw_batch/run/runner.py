"""`claw run`: plan the jobs, skip what is up to date, run the rest through the tool loop,
record what happened."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import os
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from claw_batch import cancel
from claw_batch.clock import new_run_id, now_for_run
from claw_batch.config import Clawfile, Executor, Project
from claw_batch.errors import (
    ClawError,
    Interrupted,
    LimitExceeded,
    Locked,
    TaskFailed,
    UsageError,
    said,
)
from claw_batch.llm.endpoints import Mode, Models, api_keys, missing_keys
from claw_batch.mcp.remote import header_secrets
from claw_batch.plan.graph import Graph, build
from claw_batch.plan.jobs import Job, expand, select_tasks
from claw_batch.run import executorcheck
from claw_batch.run.lock import ADVICE, ProjectLock
from claw_batch.run.notices import Send, notify_secrets
from claw_batch.run.results import JobResult, Results, RunSummary
from claw_batch.run.session import RunSession, RunSetup
from claw_batch.safety.redact import Redactor, secrets_from_env
from claw_batch.store.state import State
from claw_batch.terminal.progress import Progress

if TYPE_CHECKING:
    from claw_batch.run.executor import Cluster
    from claw_batch.run.servers import RunServers


@dataclass(frozen=True)
class Chosen:
    """What a `Selection` chose for one run."""

    tasks: list[str]  # to run, in any order
    finish: Callable[[RunSummary], None]  # after the run, before the lock is let go
    # A run stopped before any job by a usage error (an unset key): the choice is undone.
    leave: Callable[[], None] = lambda: None


class Selection(Protocol):
    """Which of the selected tasks a run runs, decided under the project lock
    (`claw run --due`: claw_batch.triggers.due). It keeps no state between runs."""

    def candidates(self, config: Clawfile, targets: tuple[str, ...]) -> list[str]: ...

    def choose(
        self,
        config: Clawfile,
        state: State | None,
        names: list[str],
        now: dt.datetime,
        run_id: str,
        *,
        dry_run: bool,
        say: Callable[[str], None],
    ) -> Chosen:
        """Among `names` (the candidates), what runs now; a dry run writes nothing."""
        ...


@dataclass(frozen=True)
class RunOptions:
    targets: tuple[str, ...] = ()
    keep_going: bool = False
    jobs: int = 1  # -j: jobs at a time
    force: bool = False
    dry_run: bool = False
    detail: bool = True  # a dry run: prepare each job that would run (its prompt estimate)
    files: tuple[str, ...] = ()
    model: str | None = None
    mode: Mode = field(default_factory=Mode)
    argv: tuple[str, ...] = ()
    wait: bool = False  # another run holds the project: wait instead of exiting 75
    select: Selection | None = None  # which tasks run, decided under the lock (--due)
    hook: str | None = None  # the git hook this run serves: its tools cannot commit or stash
    only: tuple[Job, ...] = ()  # claw watch: these jobs of their tasks, not every match
    # What started the run, as the ledger keeps it: hand, cron (--due), schedule, watch; a
    # run for a git hook is `hook <name>` whatever this says.
    trigger: str = "hand"
    # --executor/--address (run.executorcheck.from_command_line); None: the clawfile's
    executor: Executor | None = None
    notify: bool = True  # --no-notify: no notice sent, none recorded

    @property
    def command(self) -> str:
        """The command as typed: `claw` and its arguments, whatever argv[0] was."""
        return shlex.join(["claw", *self.argv[1:]])

    @property
    def started_by(self) -> str:
        return f"hook {self.hook}" if self.hook else self.trigger


def exit_code(results: Iterable[JobResult]) -> int:
    return exit_code_of({r.status for r in results})


def exit_code_of(statuses: Set[str]) -> int:
    if "interrupted" in statuses:
        return Interrupted.exit_code
    if "failed" in statuses:
        return TaskFailed.exit_code
    if "limit" in statuses:
        return LimitExceeded.exit_code
    return 0


def _settled(results: Results) -> Iterator[str]:
    """The jobs whose result is recorded for good (their batch replies are not needed again)."""
    return (r.job.name for r in results if r.status in ("ok", "failed"))


class Runner:
    def __init__(
        self,
        project: Project,
        options: RunOptions,
        *,
        progress: Progress,
        environ: Mapping[str, str] | None = None,
        cluster: Cluster | None = None,
        send: Send | None = None,
    ) -> None:
        self.project = project
        self.options = options
        self.executor = executorcheck.effective(project.config, options.executor, hook=options.hook)
        # Where jobs' tool loops run: the cluster connected per run (_connect) for
        # --executor ray, or one given (a test's); None: here.
        self._given = cluster
        self.cluster: Cluster | None = cluster
        self.progress = progress
        self.send = send  # how notices are sent (a test's); None: claw_batch.notify.send
        self.environ = dict(os.environ if environ is None else environ)
        secrets = [*api_keys(project.config, self.environ), *secrets_from_env(self.environ)]
        secrets += header_secrets(project.config.mcp_servers, self.environ)
        secrets += notify_secrets(project.config, self.environ)
        self.redact = Redactor(secrets)
        self.workers = None  # worker processes for model calls, when they pay
        # No live call here (a dry run, a replay, a cluster's workers call): no module to load
        if not (options.dry_run or options.mode.replay or self._remote):
            from claw_batch.llm.workers import pool_for_run

            self.workers = pool_for_run(options.jobs, self.environ)
        self.models = Models(
            project.config,
            self.environ,
            options.mode,
            redact=self.redact,
            workers=self.workers,
            clawfile=project.clawfile.name,
        )
        self.graph: Graph = build(project.config)
        self.servers: RunServers | None = None  # made per run (_run), when a task uses one

    def tasks(self) -> list[str]:
        """The selected tasks and everything they depend on, each after its upstream. With
        a `select`ion (--due): its candidates, not yet in order — which of them run is
        decided under the lock."""
        config = self.project.config
        if self.options.select is not None:
            return self.options.select.candidates(config, self.options.targets)
        return self.graph.order(select_tasks(config, self.options.targets))

    def plan(self) -> list[Job]:
        """The jobs as they are now; a fan-out over an upstream's outputs is expanded again
        when its turn comes, after the upstream ran."""
        return [job for name in self.tasks() for job in self.jobs_of(name)]

    def jobs_of(self, name: str) -> Sequence[Job]:
        """The task's jobs; in a run for `claw watch`, the files it hands over."""
        only = [job for job in self.options.only if job.task == name]
        return only or expand(self.project.config, self.project.root, name)

    def run(self, then: Callable[[RunSummary], None] | None = None) -> RunSummary:
        """Run the planned jobs under the project lock, and `then` with the summary before
        the lock is let go. Errors that stop the run (the lock, a replay miss, a template
        error, Ctrl-C) end up in the summary; only a bug propagates."""
        names = self.tasks()  # an unknown target is a usage error before anything is written
        refused = self._refused(names)
        if refused is not None:  # a cluster run that cannot be done as asked: nothing written
            return RunSummary("", exit_code=refused.exit_code, error=str(refused))
        if self.options.dry_run:  # read-only: no lock, never in a running run's way
            return self._run(names)
        lock = ProjectLock(
            self.project.root,
            wait=self.options.wait,
            argv=self.options.command,
            on_wait=lambda held: self.progress.message(f"claw: {held}; waiting"),
            advice="" if self.options.hook else ADVICE,  # no --wait to pass through git
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
        run_id = "" if self.options.dry_run else new_run_id(now)
        try:
            state = self._open_state()
        except ClawError as e:  # a ledger that cannot be written (a full disk): nothing ran
            return RunSummary(run_id, exit_code=e.exit_code, error=str(e))
        select, chosen = self.options.select, None
        if select is not None:
            chosen = select.choose(
                self.project.config,
                state,
                names,
                now,
                run_id,
                dry_run=self.options.dry_run,
                say=self.progress.message,
            )
            names = self.graph.order(chosen.tasks)
            if not names:  # nothing to run: no run in the ledger, nothing printed
                return self._ended_early(RunSummary(run_id), state, chosen)
        unset = self._unset_keys(names)
        if unset is not None:  # before the run's first write: no job, no note, no ledger run
            summary = RunSummary(run_id, exit_code=unset.exit_code, error=str(unset))
            return self._ended_early(summary, state, chosen, left=True)
        try:
            self.cluster = self._connect()
        except UsageError as e:  # a cluster that cannot be reached: as an unset key stops it
            summary = RunSummary(run_id, exit_code=e.exit_code, error=self.redact(str(e)))
            return self._ended_early(summary, state, chosen, left=True)
        self._use_cache(now)
        if self.options.dry_run:
            self._say_batched(names)
        elif state is not None and self._batching(names):
            self._batch_run(state, run_id, now)
        self.servers = self._servers()
        run = RunSession(self._setup(), state, run_id, now)
        code, error = 1, None  # what the ledger says if a bug ends the run
        try:
            run.tasks(names)
            code = self._exit_code(run.results)
        except ClawError as e:
            code, error = e.exit_code, self.redact(str(e))
        except KeyboardInterrupt:
            code, error = Interrupted.exit_code, "interrupted"
        finally:
            try:  # a Ctrl-C while batch endpoints close still ends the run in the ledger
                try:
                    try:
                        self._close_servers()
                    finally:
                        self._close_cluster()
                finally:
                    self.models.close(settled=_settled(run.results))
                run.notices.end(interrupted=code == Interrupted.exit_code)
            except KeyboardInterrupt:
                code, error = Interrupted.exit_code, "interrupted"
            finally:
                self._stop_workers()
                self.models.end_cache(self.project.config.cache.max_size)
                summary = RunSummary(run_id, run.results, code, error)
                try:
                    if chosen is not None:
                        chosen.finish(summary)
                finally:
                    summary = run.close(summary)
        return summary

    def _refused(self, names: list[str]) -> UsageError | None:
        """A cluster run (`--executor ray`, `executor: {kind: ray}`) that cannot be done as
        asked (run.executorcheck); a dry run says where the jobs would run and only warns. A
        git hook's run says once that it runs here."""
        o, config, say = self.options, self.project.config, self.progress.message
        if o.hook is not None and config.executor.remote and o.executor is None:
            say("claw: a git hook runs its jobs here, not on the clawfile's Ray cluster")
        if not self.executor.remote:
            return None
        told = executorcheck.origin(o.executor, self.project.clawfile.name)
        found = executorcheck.refusals(
            config, names, o.mode, told=told, ray_installed=executorcheck.ray_installed()
        )
        if o.dry_run:
            say(f"claw: the jobs would run on {executorcheck.where(self.executor)} ({told})")
            for line in found:
                say(f"claw: warning: {line}")
            return None
        return UsageError("\n".join(found)) if found else None

    def _connect(self) -> Cluster | None:
        """The cluster the run's jobs go to; None: they run here (the default, a dry run, a
        git hook's run). Called once the checks passed (_refused), before the run's first
        write: a UsageError here (a cluster that cannot be reached) ends the run with exit 2
        and nothing written."""
        if self._given is not None or not self._remote:
            return self._given
        from claw_batch.cluster.connect import connect

        return connect(self.executor, say=self.progress.message)

    @property
    def _remote(self) -> bool:
        """Whether the run's jobs go to a cluster it connects to."""
        return self.executor.remote and not self.options.dry_run and self._given is None

    def _close_cluster(self) -> None:
        """The cluster's tasks of this run cancelled, its shared state closed (the call
        cache's replies folded into .claw/cache/), the connection let go."""
        cluster, self.cluster = self.cluster, self._given
        if cluster is not None and cluster is not self._given:
            cluster.close()

    def _servers(self) -> RunServers | None:
        """The run's MCP servers, when a task uses one: none is started before its first use."""
        from claw_batch.run import servers  # cheap; the SDK comes with the first server

        if not servers.uses_servers(self.project):
            return None
        dot_claw = self.project.root / ".claw"
        return servers.RunServers(
            self.project,
            self.environ,
            self.options.mode,
            redact=self.redact,
            # A dry run keeps the catalog in an existing .claw/ (not through a link), as
            # it keeps the parsed skills.
            write_catalog=not self.options.dry_run
            or (dot_claw.is_dir() and not dot_claw.is_symlink()),
        )

    def _close_servers(self) -> None:
        """Every server process the run started ends with it (a Ctrl-C while they stop
        still stops the rest: Hub.close)."""
        if self.servers is not None:
            self.servers.close()

    def _batching(self, names: list[str]) -> bool:
        """Whether a task of the run sends its calls through a Batch API."""
        tasks = self.project.config.tasks
        return not self.options.mode.replay and (
            self.options.mode.batch or any(tasks[n].batch for n in names)
        )

    def _say_batched(self, names: list[str]) -> None:
        """A dry run says which tasks would go through a Batch API, and why."""
        tasks, mode = self.project.config.tasks, self.options.mode
        for name in names if not mode.replay else ():
            if mode.batch or tasks[name].batch:
                why = "--batch" if mode.batch else "batch: true"
                self.progress.message(
                    f"claw: {name}: its model calls would go through the provider's Batch "
                    f"API ({why})"
                )

    def _batch_run(self, state: State, run_id: str, now: dt.datetime) -> None:
        """What the run's batch endpoints need: the ledger for their journal, its id, where
        to say what they do, and when to stop waiting (--batch-wait)."""
        import time

        from claw_batch.figures import duration
        from claw_batch.llm.batch import BatchRun
        from claw_batch.store.batches import Journal

        wait = self.options.mode.batch_wait
        self.models.batch_run = BatchRun(
            lambda endpoint: Journal(state, endpoint, now.timestamp()),
            run_id,
            self.progress.message,
            None if wait is None else time.monotonic() + wait,
            "" if wait is None else duration(wait),
            "claw run --batch" if self.options.mode.batch else "claw run",
        )

    def _use_cache(self, now: dt.datetime) -> None:
        """The call cache (llm.callcache), unless the clawfile (`cache: false`) or the run
        (`--no-cache`) turns it off; opened by the first live model call."""
        if self.options.dry_run or not self.options.mode.cache:
            return
        if self.project.config.cache.enabled:
            directory = self.project.root / ".claw" / "cache"
            self.models.use_cache(directory, now.date().isoformat(), self.progress.message)

    def _stop_workers(self) -> None:
        if self.workers is not None:
            self.workers.close()
            if self.workers.used and self.progress.verbose:
                n = self.workers.used
                self.progress.message(f"claw: model calls in {n} worker process{'es' * (n > 1)}")

    def _ended_early(
        self, summary: RunSummary, state: State | None, chosen: Chosen | None, *, left: bool = False
    ) -> RunSummary:
        """A run that ends before its session begins: its chosen slots get its outcome, or,
        `left` for the next run when a usage error stopped it."""
        try:
            if chosen is not None and left:
                chosen.leave()
            elif chosen is not None:
                chosen.finish(summary)
        finally:
            if state is not None:
                state.close()
        return summary

    def _unset_keys(self, names: list[str]) -> UsageError | None:
        """A provider the run's tasks call whose key variable is unset: the first job would
        fail on it and stop the others, so the run does not start. Recorded replies need no
        key; a dry run calls nothing, and says it; a cluster's workers read their own (a job
        whose worker lacks one fails, naming the variable)."""
        o = self.options
        if o.mode.replay or (self.executor.remote and not o.dry_run):  # the workers' keys
            return None
        unset = missing_keys(self.project.config, self.environ, names, model=o.model)
        if o.dry_run:
            for missing in unset:
                self.progress.message(f"claw: warning: {missing}")
            return None
        if unset and not o.force:  # a task whose jobs are all up to date calls no model
            running = self._would_run(names)
            unset = missing_keys(self.project.config, self.environ, running, model=o.model)
        replay = o.hook is None  # a git hook cannot replay
        return UsageError("\n".join(m.said(replay=replay) for m in unset)) if unset else None

    def _would_run(self, names: list[str]) -> list[str]:
        """The tasks of `names` with a job that would run: what `claw run -n` finds, said
        nowhere. Only asked when a key is missing, so a run pays for it only then."""
        dry = dataclasses.replace(self.options, dry_run=True, select=None, notify=False)
        quiet = Progress(io.StringIO(), quiet=True, tty=False, ticker=False)
        summary = Runner(self.project, dry, progress=quiet, environ=self.environ)._run(names)
        if summary.error:  # e.g. a template error: the run itself will say it
            return names
        return [
            n
            for n in names
            if any(r.job.task == n for r in summary.results if r.status == "would-run")
        ]

    def _setup(self) -> RunSetup:
        """What the run's session is given."""
        o = self.options
        return RunSetup(
            project=self.project,
            graph=self.graph,
            models=self.models,
            redact=self.redact,
            progress=self.progress,
            environ=self.environ,
            jobs_of=self.jobs_of,
            dry_run=o.dry_run,
            detail=o.detail,
            force=o.force,
            keep_going=o.keep_going,
            jobs=o.jobs,
            files=o.files,
            model=o.model,
            hook=o.hook,
            command=o.command,
            trigger=o.started_by,
            handed=bool(o.only),
            servers=self.servers,
            cluster=self.cluster,
            notify=o.notify,
            send=self.send,
        )

    def _exit_code(self, results: Results) -> int:
        """The run's exit code: its results are read again only when a job failed or hit a
        limit, which `on_error: warn` may forgive (100,000 of them come back from disk)."""
        if results.statuses.isdisjoint(("failed", "limit")):
            return exit_code_of(results.statuses)
        return exit_code(self._counted(results))

    def _counted(self, results: Iterable[JobResult]) -> Iterator[JobResult]:
        """The results that decide the exit code: with `on_error: warn`, a job that failed
        because the model could not be reached (or did not answer in time) only warns."""
        for r in results:
            unreachable = r.reason == "ModelError" or (r.reason or "").startswith("timeout")
            if unreachable and self.project.config.tasks[r.job.task].on_error == "warn":
                self.progress.message(
                    f"claw: {r.job.name}: {r.error or r.reason}; on_error: warn, so it does "
                    "not fail the run"
                )
                continue
            yield r

    def _open_state(self) -> State | None:
        path = self.project.root / ".claw" / "state.db"
        if self.options.dry_run:
            try:
                return State(path, readonly=True) if path.exists() else None
            except ClawError as e:  # corrupt: the next run starts afresh, and so does the plan
                self.progress.message(said(e))
                return None
        state = State(path, recover=True)  # under the project lock
        if state.recovered:
            self.progress.message(f"claw: {state.recovered}")
        return state

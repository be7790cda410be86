"""One run's working state: what it was given (RunSetup), the ledger and the file hashes,
and what its jobs became. It takes each job in turn: skipped after a failed upstream, kept
when the Decider finds it up to date, else run (claw_batch.run.job); the job recording
(claw_batch.run.record) and the run's own last writes (claw_batch.run.closeout) are their
modules'."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from claw_batch.agent.budget import Spend
from claw_batch.config import Project
from claw_batch.errors import Interrupted, TaskFailed
from claw_batch.llm.endpoints import Models
from claw_batch.plan.fingerprint import Fingerprint
from claw_batch.plan.graph import Graph
from claw_batch.plan.jobs import Job
from claw_batch.plan.quickcheck import TaskKey
from claw_batch.plan.uptodate import Decider, Decision
from claw_batch.run.closeout import CloseOut
from claw_batch.run.context import RunCache, RunContext
from claw_batch.run.notices import Notices, Send
from claw_batch.run.pool import BATCH_JOBS, Scheduler
from claw_batch.run.prepare import Prepared, estimate, fingerprint_of, prepare, task_parts
from claw_batch.run.record import NOT_UTF8, Recorder, unrecordable
from claw_batch.run.results import NO_USAGE, JobResult, Results, RunSummary, UpToDate, not_run
from claw_batch.run.servers import ServerUnavailable
from claw_batch.safety.childenv import git_read_only, scrubbed_env
from claw_batch.safety.paths import checked_output
from claw_batch.safety.redact import Redactor
from claw_batch.safety.tempsweep import sweep_run_folders
from claw_batch.safety.untrusted import printable
from claw_batch.skills import cache as skillcache
from claw_batch.skills import skill as skills
from claw_batch.store.filehash import FileHashes
from claw_batch.store.state import State
from claw_batch.taint.ledger import TaintedFiles
from claw_batch.terminal.progress import Progress

if TYPE_CHECKING:
    from claw_batch.run.delegation import SubJobs
    from claw_batch.run.executor import Cluster
    from claw_batch.run.servers import RunServers
    from claw_batch.run.snapshot import Snapshots


@dataclass(frozen=True)
class RunSetup:
    """What a run's session is given: the project and what the runner made of it, and how
    the run was asked for (claw_batch.run.runner.RunOptions)."""

    project: Project
    graph: Graph
    models: Models
    redact: Redactor
    progress: Progress
    environ: Mapping[str, str]
    jobs_of: Callable[[str], Sequence[Job]]  # a task's jobs, when its turn comes
    dry_run: bool = False
    detail: bool = True  # a dry run prepares each job that would run (RunOptions.detail)
    force: bool = False
    keep_going: bool = False
    jobs: int = 1  # at a time
    files: tuple[str, ...] = ()
    model: str | None = None
    hook: str | None = None  # the git hook the run serves: its tools cannot commit or stash
    command: str = "claw"  # as typed (RunOptions.command)
    trigger: str = "hand"  # what started the run (RunOptions.started_by)
    handed: bool = False  # claw watch: the jobs are the files handed over, not every match
    servers: RunServers | None = None  # the run's MCP servers (claw_batch.run.servers)
    # --executor ray: the cluster its jobs' tool loops run on (claw_batch.run.remotejob)
    cluster: Cluster | None = None
    notify: bool = True  # --no-notify: nothing sent, nothing recorded (claw_batch.run.notices)
    send: Send | None = None  # how a notice is sent (tests); None: claw_batch.notify.send


class Preparation:
    """A job prepared when first asked: the full up-to-date check asks for its fingerprint
    and its outputs' hashes, the quick check for nothing (claw_batch.plan.uptodate)."""

    def __init__(
        self,
        run: RunContext,
        cache: RunCache,
        job: Job,
        upstream_names: tuple[str, ...],
        hash_file: Callable[[str], str | None],
    ) -> None:
        self.run = run
        self.cache = cache
        self.job = job
        self.upstream_names = upstream_names
        self.hash_file = hash_file  # hashes a project-relative path (None: missing)

    @functools.cached_property
    def prepared(self) -> Prepared:
        return prepare(self.run, self.cache, self.job, self.upstream_names)

    @functools.cached_property
    def fingerprint(self) -> Fingerprint:
        """Over the outputs of the tasks this one `needs:` (its prompt can show them as
        needs.X). An upstream reached only through an input glob is not repeated here: the
        files the job reads are already in its inputs, by content — so one changed ticket
        reruns the one review that reads it, not all of them."""
        needs = self.run.project.config.tasks[self.job.task].needs
        return fingerprint_of(self.prepared, self.hash_file, self.cache.outputs_of(needs))

    def output_hash(self, rel: str) -> str | None:
        """An output's hash now; None, as if missing (the job runs again, and the check of its
        outputs says why), when it resolves where the job may not write: a symlink to a host
        file is not followed to hash that file."""
        try:
            checked_output(self.prepared.policy, rel)
        except TaskFailed:
            return None
        return self.hash_file(rel)


class RunSession:
    """One run's jobs: each checked once, then kept or run; and what became of them."""

    def __init__(self, setup: RunSetup, state: State | None, run_id: str, now: dt.datetime):
        self.setup = setup
        root, config = setup.project.root, setup.project.config
        self.hashes = FileHashes(state, root)
        self.decider = Decider(
            state,
            self.hashes,
            setup.graph,
            config.tasks,
            key=self._task_key,
            force=setup.force,
            dry_run=setup.dry_run,
        )
        self.cache = RunCache(readers=setup.graph.dependents)
        self.results = Results()
        self.failed: set[str] = set()  # tasks with a job that failed
        # Which files are outside content: watched, or written by a tainted job (the ledger).
        tainted = TaintedFiles(state, config.untrusted, self.hashes.hash, str(root))
        if state and not setup.dry_run:
            self._begin(state, run_id, now)
            if setup.servers is not None:  # what its MCP servers write is outside content
                setup.servers.ledger(tainted, run_id)
        found = self._skills()
        # Per skill that is not available on this machine: what it lacks.
        self.unavailable = {s.name: s.unavailable(setup.environ) for s in found}
        offered = tuple(s for s in found if not self.unavailable[s.name])
        self.ctx = self._context(state, now, tainted, offered)
        run_dir = root / ".claw" / "runs" / run_id
        self.records = self._recorder(state, run_id, run_dir)
        self.snapshots: Snapshots | None = None
        if setup.cluster is not None and not setup.dry_run:
            self.snapshots = self._shared(setup.cluster)
        self.closing = self._closeout(state, run_dir, now)
        self.notices = self._notices(state, run_id)
        self.subjobs: SubJobs | None = None  # made when a task may delegate
        if not setup.dry_run and any("delegate" in t.offered_tools for t in config.tasks.values()):
            from claw_batch.run.delegation import SubJobs

            self.subjobs = SubJobs(
                self.ctx,
                self.cache,
                self.records,
                setup.progress,
                jobs=setup.jobs,
                noted=self.closing,
            )

    def _begin(self, state: State, run_id: str, now: dt.datetime) -> None:
        command = self.setup.redact(self.setup.command)  # a key given on the command line
        state.begin_run(run_id, now.isoformat(), command, self.setup.trigger)
        # Temp files a killed run left; the real clock's start, as `now` can be pinned
        project = self.setup.project
        sweep_run_folders(project.root, project.config, before_ns=time.time_ns())

    def _shared(self, cluster: Cluster) -> Snapshots:
        """What the cluster's workers share for this run, and the project as they see it."""
        from claw_batch.run.snapshot import Snapshots

        models = self.setup.models
        config = self.setup.project.config
        cluster.share(config, spend=self.ctx.spend, cache_dir=models.cache_dir, day=models.day)
        # What the run's Redactor knows never ships: a project file holding it goes redacted
        from claw_batch.llm.endpoints import api_keys
        from claw_batch.safety.redact import secrets_from_env

        known = [*api_keys(config, self.setup.environ), *secrets_from_env(self.setup.environ)]
        root = self.setup.project.root
        return Snapshots(
            root, self.hashes, cluster.put, self._upstream_all, self.setup.redact, known
        )

    def _upstream_all(self, task: str) -> tuple[str, ...]:
        """The tasks `task` depends on, directly or through others."""
        found: dict[str, None] = {}
        todo = list(self.setup.graph.upstream(task))
        while todo:
            name = todo.pop()
            if name not in found:
                found[name] = None
                todo.extend(self.setup.graph.upstream(name))
        return tuple(found)

    def _skills(self) -> list[skills.Skill]:
        root, workspace = self.setup.project.root, self.setup.project.config.workspace
        # A dry run too keeps the parsed skills (into an existing .claw/): `claw list`, the
        # next time, imports no YAML; but never through a `.claw` link a clone came with.
        write = not self.setup.dry_run or not (root / ".claw").is_symlink()
        return skills.pick(skillcache.scan(root, skills.skill_dirs(root, workspace), write=write))

    def _context(
        self,
        state: State | None,
        now: dt.datetime,
        tainted: TaintedFiles,
        offered: tuple[skills.Skill, ...],
    ) -> RunContext:
        setup = self.setup
        root, config = setup.project.root, setup.project.config
        return RunContext(
            project=setup.project,
            models=setup.models,
            now=now,
            env={**scrubbed_env(), **(git_read_only(root) if setup.hook else {})},
            files=setup.files,
            model_override=setup.model,
            skills=offered,
            redact=setup.redact,
            tainted=tainted,
            force=setup.force,
            servers=setup.servers,
            warn=setup.progress.warn_once,
            spend=Spend(config, state.spent_since, now) if state and not setup.dry_run else None,
        )

    def _recorder(self, state: State | None, run_id: str, run_dir: Path) -> Recorder:
        return Recorder(
            state,
            run_id,
            run_dir,
            self.setup.project.root,
            hashes=self.hashes,
            decider=self.decider,
            cache=self.cache,
            redact=self.setup.redact,
            environ=self.setup.environ,
        )

    def _closeout(self, state: State | None, run_dir: Path, now: dt.datetime) -> CloseOut:
        return CloseOut(
            state,
            self.setup.project,
            run_dir,
            hashes=self.hashes,
            decider=self.decider,
            redact=self.setup.redact,
            environ=self.setup.environ,
            now=now,
            dry_run=self.setup.dry_run,
            # A commit's hook changes nothing in the tree git commits from: no daily note.
            notes=self.setup.hook is None,
        )

    def _notices(self, state: State | None, run_id: str) -> Notices:
        setup = self.setup
        return Notices(
            setup.project,
            state,
            run_id,
            redact=setup.redact,
            environ=setup.environ,
            warn=setup.progress.warn_once,
            say=setup.progress.message,
            enabled=setup.notify,
            dry_run=setup.dry_run,
            send=setup.send,
        )

    def _task_done(self, task: str) -> None:
        """The task's last job of the run ended: its daily-note entry, then its notice."""
        self.closing.note(task)
        self.notices.task_done(task)

    def _read_outside(self, job: Job) -> None:
        self.closing.read_outside(job)
        self.notices.read_outside(job)

    def tasks(self, names: list[str]) -> None:
        self._say_unavailable(names)
        scheduler = Scheduler(
            jobs=self.setup.jobs,
            upstream=self.setup.graph.upstream,
            expand=self._expand,
            check=self.check,
            settle_all=self.settle_all,
            on_result=self.finished,
            on_task_done=self._task_done,
            flush=self.records.flush,
            batched=self._batched,
            batch_jobs=BATCH_JOBS if any(map(self._batched, names)) else 0,
        )
        scheduler.run(names)
        if "interrupted" in self.results.statuses:
            raise Interrupted("interrupted")

    def _batched(self, task: str) -> bool:
        """Whether the task's calls go through a Batch API (its jobs mostly wait)."""
        mode = self.setup.models.mode
        if self.setup.dry_run or mode.replay:
            return False
        return mode.batch or self.setup.project.config.tasks[task].batch

    def close(self, summary: RunSummary) -> RunSummary:
        """The run's last writes (claw_batch.run.closeout); the summary as they leave it."""
        return self.closing.close(summary)

    def _expand(self, name: str) -> Sequence[Job]:
        """The task's jobs, when its turn comes; the progress display counts them. A large
        task found up to date has them from the ledger, listed meanwhile by the forked half
        of its check (Decider.settle_task)."""
        jobs = None
        upstream = self.setup.graph.upstream(name)
        if not self.setup.handed and not any(n in self.failed for n in upstream):
            jobs = self.decider.settle_task(name, lambda: self.setup.jobs_of(name))
        if jobs is None:
            jobs = self.setup.jobs_of(name)
        self.setup.progress.expect(name, len(jobs))
        return jobs

    def _say_unavailable(self, names: list[str]) -> None:
        """A skill a task names that this machine cannot offer: said, not fatal."""
        for name in names:
            for skill in self.setup.project.config.tasks[name].skills or ():
                if self.unavailable.get(skill):
                    self.setup.progress.message(
                        f"claw: {name}: skill {skill!r} is not offered: it needs "
                        f"{', '.join(self.unavailable[skill])}"
                    )

    def finished(self, result: JobResult) -> bool:
        """Record a job's result; True when no more jobs should start."""
        self.notices.took(result)  # what its task's notice needs of the answer
        self.results.append(self.closing.kept(result))  # without its answer
        self.setup.progress.job_finished(result)
        if result.status == "interrupted":
            return True
        if result.status in ("failed", "limit", "skipped"):
            self.failed.add(result.job.task)
            # A file's name (a stranger's, in a watched folder) stops no other job.
            stops = result.status != "skipped" and result.reason != NOT_UTF8
            return stops and not self.setup.keep_going
        return False

    def settle_all(self, task: str, jobs: Sequence[Job]) -> bool:
        """Whether every job of the task is up to date by the quick check, taken for all of
        them at once (a no-op's 100,000 jobs: one loop, no check and no scheduling a job);
        if so, their results are recorded. Else each job takes `check` in turn."""
        upstream = self.setup.graph.upstream(task)
        if any(n in self.failed for n in upstream):
            return False
        outputs = self.decider.sealed_outputs(task, jobs)
        if outputs is None:
            return False
        results = UpToDate(jobs, outputs)  # each made when read: a no-op reads few
        self.results.extend(results)  # no answers to leave out (CloseOut.kept)
        self.setup.progress.jobs_up_to_date(results)
        return True

    def check(self, job: Job) -> JobResult | Callable[[], JobResult]:
        """The job's result when it need not run, else the work that runs it."""
        upstream = self.setup.graph.upstream(job.task)
        if self.failed and upstream:
            blocked = [n for n in upstream if n in self.failed]
            if blocked:
                return not_run(job, "skipped", (f"needs {', '.join(blocked)}, which failed",))
        refused = unrecordable(job)
        if refused is not None:  # its records (the note, the report) name it as printed
            shown = dataclasses.replace(job, item=printable(job.item or ""))
            return JobResult(shown, "failed", NOT_UTF8, 0.0, NO_USAGE, None, refused, "")
        output = self.decider.sealed_output(job)
        if output is not False:  # the quick check: nothing made for the job but its result
            return not_run(job, "up-to-date", (), output)
        if self.setup.cluster is not None and not self.setup.dry_run:
            from claw_batch.run.executor import refused_on_cluster

            refused = refused_on_cluster(self.setup.project.config.tasks[job.task])
            if refused is not None:  # before its MCP servers start
                return JobResult(job, "failed", "TaskFailed", 0.0, NO_USAGE, None, refused, "")
        preparation = Preparation(self.ctx, self.cache, job, upstream, self.hashes.hash)
        try:
            return self._checked(job, preparation)
        except ServerUnavailable as e:  # its task's MCP server: this task's jobs fail, not all
            return JobResult(job, "failed", "ServerUnavailable", 0.0, NO_USAGE, None, str(e), "")

    def _checked(self, job: Job, preparation: Preparation) -> JobResult | Callable[[], JobResult]:
        decision = self.decider.decide(job, preparation)
        if not decision.run:
            return self._keep(job, decision)
        if not self.setup.detail and decision.done is None and not self.records.may_recall(job):
            return not_run(job, "would-run", decision.reasons)  # its answer, unprepared
        prepared, fp = preparation.prepared, preparation.fingerprint
        if prepared.task.check and not self.setup.force:
            known = self.records.recall(prepared, fp, dry_run=self.setup.dry_run)
            if known is not None:
                return known
        if self.setup.dry_run:
            result = not_run(job, "would-run", decision.reasons, prepared.output)
            return result._replace(prompt_estimate=estimate(self.ctx, prepared))
        return lambda: self._execute(prepared, fp, decision)

    def _keep(self, job: Job, decision: Decision) -> JobResult:
        """The result of a job that need not run."""
        if self.setup.graph.dependents(job.task):  # what the tasks after it see of it
            done = decision.done
            assert done is not None  # read for a job that others read
            outputs = decision.outputs or done.outputs
            self.cache.produced(job.task, outputs, decision.output, done.result, done.tainted)
        return not_run(job, decision.status, decision.reasons, decision.output)

    def _execute(self, p: Prepared, fp: Fingerprint, decision: Decision) -> JobResult:
        cluster = self.setup.cluster
        if cluster is not None and self.snapshots is not None:
            from claw_batch.run.remotejob import run_remote

            return run_remote(
                self.ctx,
                self.cache,
                p,
                fp,
                decision,
                cluster=cluster,
                snapshots=self.snapshots,
                records=self.records,
                progress=self.setup.progress,
                read_outside=self._read_outside,
                upstream_names=self.setup.graph.upstream(p.job.task),
            )
        # The tool loop, its tools and the sandbox: imported when a job runs, which a no-op's
        # never does.
        from claw_batch.run.job import run_job

        return run_job(
            self.ctx,
            p,
            fp,
            decision,
            records=self.records,
            progress=self.setup.progress,
            read_outside=self._read_outside,
            delegates=self.subjobs,
        )

    def _task_key(self, task: str) -> TaskKey:
        parts = task_parts(self.ctx, self.cache, task)
        project, files = self.setup.project, self.ctx.files
        return TaskKey.of(project, task, parts, files=files, hash_file=self.hashes.hash)

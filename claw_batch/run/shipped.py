"""A job's tool loop on a cluster's worker (--executor ray): `work` runs it in a scratch copy
of the project as the job may see it (claw_batch.run.scratch) and returns what it did — its
answer, its events, the files it changed, what it marked as outside content — as a plain
value. Nothing is written to the project here: the coordinator applies it
(claw_batch.run.remotejob).

What travels to the worker (`Shipment`) holds no secret: the worker reads the keys from its
own environment by the names the clawfile gives, and redacts with its own Redactor; the
coordinator redacts again what comes back."""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claw_batch.config import Clawfile, Project, Task
from claw_batch.errors import ClawfileError, TaskFailed
from claw_batch.llm.endpoints import Mode, api_keys
from claw_batch.llm.messages import Usage
from claw_batch.plan.fingerprint import digest
from claw_batch.plan.jobs import Job
from claw_batch.plan.render import Upstream
from claw_batch.run.context import RunCache, RunContext
from claw_batch.run.executor import Worker, refused_on_cluster
from claw_batch.run.jobsink import Tally
from claw_batch.run.prepare import prepare
from claw_batch.run.results import Status
from claw_batch.run.scratch import Change, Key, changes, keys, materialize, scratch
from claw_batch.run.snapshot import Snapshot
from claw_batch.safety.atomic import DirSyncs
from claw_batch.safety.childenv import scrubbed_env
from claw_batch.safety.redact import Redactor, secrets_from_env
from claw_batch.skills import cache as skillcache
from claw_batch.skills import skill as skills
from claw_batch.store.filehash import FileHashes
from claw_batch.taint.view import Mark, TaintView


@dataclass(frozen=True)
class Shipment:
    """One job as the coordinator sends it: plain values, no secret."""

    snapshot: object  # the handle of its task's view (claw_batch.run.snapshot)
    clawfile: str  # the clawfile's path, relative to the project root
    job: Job
    upstream_names: tuple[str, ...]
    upstream: Mapping[str, Upstream]  # what `needs.X` shows
    prompt_digest: str  # of its prompt as the coordinator prepared it
    now: dt.datetime
    mode: Mode
    run_id: str
    sample: int = 0
    files: tuple[str, ...] = ()
    model: str | None = None
    force: bool = False
    tainted: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # taint.view


@dataclass(frozen=True)
class Shipped:
    """What a job did on its worker."""

    status: Status  # ok | failed | limit | interrupted
    node: str
    reason: str | None = None
    error: str | None = None
    text: str = ""  # its answer, as written to its output
    output: str | None = None
    verdict: dict[str, Any] | None = None
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    changes: tuple[Change, ...] = ()  # only when it succeeded
    marks: tuple[Mark, ...] = ()  # files its tools left holding outside content
    cleared: tuple[str, ...] = ()  # files an untainted write of it cleared
    source: str | None = None  # the outside content it read (None: none)
    called: tuple[str, ...] = ()  # its MCP tools called (none: refused here)


class Buffered(Tally):
    """The job's events, kept to go back with its result; usage summed as JobSink does."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))
        self.count(kind, fields)

    def flush(self) -> None:
        pass


def work(worker: Worker, ship: Shipment) -> Shipped:
    """Run the job on this worker (see the module's doc)."""
    worker.started(ship.job.name)
    snapshot = worker.get(ship.snapshot)
    assert isinstance(snapshot, Snapshot)
    try:
        return _run(worker, ship, snapshot)
    except TaskFailed as e:  # the copy could not be made here: the job, not the run
        return Shipped("failed", worker.node, "TaskFailed", str(e))


def _run(worker: Worker, ship: Shipment, snapshot: Snapshot) -> Shipped:
    from claw_batch.run.job import attempt_job, job_taint

    source = materialize(snapshot, worker.get)
    config = _project(source, ship.clawfile, snapshot.digest).config
    linked = "bash" not in config.tasks[ship.job.task].offered_tools  # scratch.scratch
    with scratch(snapshot, worker.get, linked=linked) as root:
        before = keys(root, linked=linked)
        project = _project(root, ship.clawfile, snapshot.digest)
        config = project.config
        environ = os.environ
        redact = Redactor([*api_keys(config, environ), *secrets_from_env(environ)])
        hashes = FileHashes(None, root)
        ctx = RunContext(
            project=project,
            models=worker.models(
                config, ship.mode, environ=environ, redact=redact, clawfile=ship.clawfile
            ),
            now=ship.now,
            env=scrubbed_env(),
            files=ship.files,
            model_override=ship.model,
            skills=_skills(root, config),
            spend=worker.spend(),
            redact=redact,
            # No git here: the staged copies as the coordinator found them
            tainted=TaintView(
                ship.tainted, config.untrusted, _real(hashes, snapshot), staged=snapshot.staged
            ),
            force=ship.force,
        )
        cache = RunCache(readers=lambda _: ())
        cache.upstream.update(ship.upstream)
        task = config.tasks[ship.job.task]
        refused = refused_on_cluster(task)
        if refused is not None:  # never a server started here
            return Shipped("failed", worker.node, "TaskFailed", refused)
        p = prepare(ctx, cache, ship.job, ship.upstream_names)
        if digest(p.prompt) != ship.prompt_digest:
            return Shipped(
                "failed",
                worker.node,
                "TaskFailed",
                f"its prompt on {worker.node} is not the one claw run prepared (the project "
                "changed meanwhile, or the prompt reads what a worker cannot see: git); "
                "nothing was sent to the model",
            )
        taint = job_taint(ctx, p, ship.run_id)
        sink = Buffered()
        called: list[str] = []
        outcome, status, reason, error = attempt_job(
            ctx, p, sink, taint, DirSyncs(), ship.sample, called
        )
        view = ctx.tainted
        assert isinstance(view, TaintView)
        return Shipped(
            status=status,
            node=worker.node,
            reason=reason,
            error=redact(error) if error else None,
            text=outcome.text if outcome else "",
            output=outcome.output if outcome else None,
            verdict=outcome.verdict if outcome else None,
            steps=outcome.loop.steps if outcome else 0,
            usage=outcome.loop.usage if outcome else Usage(),
            events=tuple(sink.events),
            changes=tuple(_changes(root, snapshot, before, linked, task)) if status == "ok" else (),
            marks=tuple(view.marks.values()),
            cleared=tuple(sorted(view.cleared)),
            source=taint.source,
            called=tuple(called),
        )


def _real(hashes: FileHashes, snapshot: Snapshot) -> Callable[[str], str | None]:
    """A file's sha256 as the coordinator's ledger knows it: a file shipped redacted
    (claw_batch.run.snapshot) is, while unchanged, the file it stands for."""
    redacted = snapshot.redacted

    def hash_file(rel: str) -> str | None:
        sha = hashes.hash(rel)
        shipped = redacted.get(rel)
        return shipped[1] if shipped is not None and sha == shipped[0] else sha

    return hash_file


def _changes(
    root: Path, snapshot: Snapshot, before: Mapping[str, Key], linked: bool, task: Task
) -> list[Change]:
    """What the job changed, bounded by its task's limits.disk (scratch.changes)."""
    from claw_batch.sandbox.bubblewrap import Limits

    limit = task.limits.disk or Limits().disk
    return changes(root, snapshot, before, linked=linked, max_bytes=limit)


_configs: dict[tuple[str, str], Clawfile] = {}  # (snapshot, clawfile) -> its clawfile, parsed
_configs_lock = threading.Lock()


def _project(root: Path, clawfile: str, snapshot: str) -> Project:
    """The project in the scratch copy; its clawfile validated once per snapshot per
    process."""
    path = root / clawfile
    with _configs_lock:
        config = _configs.get((snapshot, clawfile))
    if config is None:
        from claw_batch.clawfile.validate import validate

        if not path.is_file():
            raise ClawfileError(f"{clawfile}: not in the project's copy on this worker")
        config = validate(path, root).config
        with _configs_lock:
            _configs[(snapshot, clawfile)] = config
    return Project(root, path, config)


def _skills(root: Path, config: Clawfile) -> tuple[skills.Skill, ...]:
    """The skills offered on this worker, found as `claw run` finds them (RunSession)."""
    found = skills.pick(
        skillcache.scan(root, skills.skill_dirs(root, config.workspace), write=False)
    )
    return tuple(s for s in found if not s.unavailable(os.environ))

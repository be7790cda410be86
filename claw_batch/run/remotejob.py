"""Run one job on a cluster (--executor ray), the coordinator's side, as claw_batch.run.job
runs one here: its row and transcript opened, the job shipped (claw_batch.run.shipped),
its events replayed into its transcript, the ledger's calls and the progress display, its
changes applied to the project only when it succeeded (claw_batch.run.apply), and what
became of it recorded.

Unlike a local job, whose tools' writes stay when it fails, a failed, limited or
interrupted cluster job applies nothing: its changes are in a scratch copy that is gone."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from claw_batch import baton
from claw_batch.agent.loop import LoopResult
from claw_batch.errors import ClawError, LimitExceeded, TaskFailed
from claw_batch.plan.fingerprint import Fingerprint, digest
from claw_batch.plan.jobs import Job
from claw_batch.plan.uptodate import Decision
from claw_batch.run.apply import Taint, apply
from claw_batch.run.context import RunCache, RunContext
from claw_batch.run.executor import Cluster, refused_on_cluster
from claw_batch.run.job import Attempt, Outcome, abort, conclude, opened, sampled
from claw_batch.run.jobsink import JobSink
from claw_batch.run.prepare import Prepared
from claw_batch.run.record import Recorder
from claw_batch.run.results import JobResult
from claw_batch.run.scratch import Change
from claw_batch.run.shipped import Shipment, Shipped, work
from claw_batch.run.snapshot import Snapshots
from claw_batch.taint.ledger import Writer
from claw_batch.taint.view import shipped_rows
from claw_batch.terminal.progress import Progress


def run_remote(
    run: RunContext,
    cache: RunCache,
    p: Prepared,
    fp: Fingerprint,
    decision: Decision,
    *,
    cluster: Cluster,
    snapshots: Snapshots,
    records: Recorder,
    progress: Progress,
    read_outside: Callable[[Job], None],
    upstream_names: tuple[str, ...] = (),
) -> JobResult:
    """Run the job on the cluster, record what became of it, and return that."""
    job = p.job
    started_wall, transcript, sink = opened(p, decision, records, progress)
    started = time.monotonic()
    back: Shipped | None = None
    try:
        refused = refused_on_cluster(p.task)
        if refused is not None:
            attempt: Attempt = (None, "failed", "TaskFailed", refused)
        else:
            ship = _shipment(run, cache, p, records, snapshots, upstream_names)
            back, attempt = _called(cluster, ship, progress)
        if back is not None:
            _replay(back, sink)
            attempt = _applied(run, p, back, attempt, records, snapshots)
    except Exception as e:  # it stops the run: close the job's records first
        abort(run, job, records, transcript, sink, started, started_wall, e)
        raise
    finally:
        if back is not None and back.source is not None:
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
        called=list(back.called) if back else [],
        tainted=back.source if back else None,
        node=back.node if back else None,
    )


def _shipment(
    run: RunContext,
    cache: RunCache,
    p: Prepared,
    records: Recorder,
    snapshots: Snapshots,
    upstream_names: tuple[str, ...],
) -> Shipment:
    job, task = p.job, p.task
    names = upstream_names or tuple(task.needs)  # what `prepare` shows as needs.X
    sample = records.sample(job, fresh=run.force) if sampled(run, p) else 0
    root = run.project.root
    return Shipment(
        snapshot=snapshots.view(job.task),
        clawfile=Path(run.project.clawfile).relative_to(root).as_posix(),
        job=job,
        upstream_names=upstream_names,
        upstream={n: cache.upstream[n] for n in names if n in cache.upstream},
        prompt_digest=digest(p.prompt),
        now=run.now,
        mode=run.models.mode,
        run_id=records.run_id,
        sample=sample,
        files=run.files,
        model=run.model_override,
        force=run.force,
        tainted=shipped_rows(run.tainted) if run.tainted is not None else {},
    )


def _called(cluster: Cluster, ship: Shipment, progress: Progress) -> tuple[Shipped | None, Attempt]:
    """The job's work on the cluster, and what ended it when it came back with nothing;
    the progress display learns the node it runs on."""
    call = cluster.call(work, ship, job=ship.job.name)
    try:
        with baton.released():  # the other jobs and the scheduler go on meanwhile
            back = call.result(started=lambda node: progress.job_node(ship.job, node))
    except KeyboardInterrupt:
        return None, (None, "interrupted", "interrupted", "interrupted (Ctrl-C or SIGTERM)")
    except TaskFailed as e:  # the worker or node was lost, and Ray gave up retrying it
        return None, (None, "failed", "TaskFailed", f"the cluster could not run it: {e}")
    except LimitExceeded as e:  # a limit met on the worker outside its tool loop
        return None, (None, "limit", str(e).split(":")[0], str(e))
    except ClawError as e:  # what its worker met (its clawfile there, a skill, a tool): this
        return None, (None, "failed", type(e).__name__, str(e))  # job's, never the run's
    return back, (None, back.status, back.reason, back.error)


def _replay(back: Shipped, sink: JobSink) -> None:
    """Its events into its transcript (redacted again, with this machine's keys), the
    ledger's calls and the progress display, as they happened on the worker."""
    for kind, fields in back.events:
        sink(kind, **fields)


def _applied(
    run: RunContext,
    p: Prepared,
    back: Shipped,
    attempt: Attempt,
    records: Recorder,
    snapshots: Snapshots,
) -> Attempt:
    """The attempt as it ends here: a successful job's changes applied, or it failed."""
    text = run.redact(back.text)
    loop = LoopResult(text, back.usage, back.steps)
    outcome = Outcome(text, loop, back.output, back.verdict) if back.text or back.output else None
    if back.status != "ok":
        return outcome, attempt[1], attempt[2], attempt[3]
    changes = [_redacted_output(c, p.output, text) for c in back.changes]
    taint = Taint(
        run.tainted,
        Writer(p.job.task, p.job.item or "", records.run_id),
        back.source,
        back.marks,
    )
    try:
        apply(
            p.policy,
            changes,
            taint,
            synced=records.synced,
            wrote=lambda rel, data, mode: snapshots.wrote(p.job.task, rel, data, mode),
        )
    except TaskFailed as e:
        return None, "failed", "TaskFailed", str(e)
    if outcome is None:
        outcome = Outcome(text, loop, back.output, back.verdict)
    return outcome, "ok", None, None


def _redacted_output(c: Change, output: str | None, text: str) -> Change:
    """The job's output holds its answer as this machine redacts it."""
    if output is None or c.rel != output or c.kind != "file":
        return c
    return Change(c.rel, "file", text.encode(), c.mode)

"""Handing settled files over to `claw run`, each content once per task.

A batch of settled files is sorted: a file whose content this task has processed already
(the watch ledger says so, or another file of the batch has it) is done without a run, one
whose content failed in this `claw watch` is not retried (change the file, or start it
again), and the rest go through the make engine as one `claw run` of just their jobs (the
project lock, the fingerprints, `-j`). Under its lock, after it, each content's outcome is
recorded in the watch ledger, so the same bytes are processed once per task — dropped again
or under another name, they are not processed again until the task or its prompt changes —
and each file is moved to its task's `done:` or `failed:` folder, when it has one.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from claw_batch import globs
from claw_batch.clock import now_for_run
from claw_batch.config import Project, Task
from claw_batch.errors import ClawError, said
from claw_batch.plan.jobs import Job
from claw_batch.plan.uptodate import KEPT
from claw_batch.run.results import JobResult, RunSummary
from claw_batch.run.runner import Runner, RunOptions
from claw_batch.store.filehash import FileHashes
from claw_batch.store.state import State
from claw_batch.terminal.progress import Progress
from claw_batch.triggers.settle import StatKey, stat_key
from claw_batch.triggers.watchfs import move_into
from claw_batch.triggers.watchledger import Handled, WatchLedger, watch_key

DONE = frozenset({"ok", "up-to-date"})  # the content is processed
FAILED = frozenset({"failed", "limit", "skipped"})  # it failed (or its upstream did)


@dataclass
class Seen:
    """What one `claw watch` has handled, from batch to batch."""

    # (task, file): the file as it was handled, so that it is handled again once it changes
    handled: dict[tuple[str, str], StatKey] = field(default_factory=dict)
    # (task, content, key): contents whose job failed, not retried in this claw watch
    failed: set[tuple[str, str, str]] = field(default_factory=set)


@dataclass(frozen=True)
class Arrival:
    task: str
    rel: str
    content: str
    stat: StatKey


class Batch:
    """One batch of settled files, handed over: `run` sorts, runs, records and moves them."""

    def __init__(
        self,
        project: Project,
        names: list[str],
        options: RunOptions,
        *,
        progress: Progress,
        environ: dict[str, str],
        seen: Seen,
        rescan: float,
    ) -> None:
        self.project = project
        self.tasks: dict[str, Task] = {name: project.config.tasks[name] for name in names}
        self.options = options
        self.progress = progress
        self.environ = environ
        self.seen = seen
        self.rescan = rescan  # seconds between rescans, for what a message promises
        self.root = str(project.root)
        self.real_root = os.path.realpath(project.root)
        self.arrivals: list[Arrival] = []  # new contents, run in this batch
        # Files whose content was handled: by the ledger, in this session (None: it failed),
        # or by another file of this batch.
        self.repeats: dict[Arrival, Handled | Arrival | None] = {}

    def run(self, ready: list[str]) -> int:
        """Run the jobs of the settled files that are new content; returns the run's exit
        code (0 when nothing ran)."""
        try:
            state: State | None = State(self.project.root / ".claw" / "state.db")
        except ClawError as e:  # corrupt: the run sets it aside, under the lock
            self.progress.message(f"claw watch: {e}; the run sets it aside and starts afresh")
            state = None
        try:
            ledger = WatchLedger(state) if state else None
            hashes = FileHashes(state, self.project.root)
            self._sort(ready, ledger, hashes)
            hashes.save()
        finally:
            if state:
                state.close()
        self._settle_repeats()
        if not self.arrivals:
            return 0
        jobs = tuple(Job(a.task, a.rel) for a in self.arrivals)
        targets = tuple(dict.fromkeys(a.task for a in self.arrivals))
        options = dataclasses.replace(self.options, targets=targets, only=jobs)
        runner = Runner(self.project, options, progress=self.progress, environ=self.environ)
        summary = runner.run(then=self._record)
        self.progress.finish()
        if summary.error:
            self.progress.message(said(summary.error))
        return summary.exit_code

    def _sort(self, ready: list[str], ledger: WatchLedger | None, hashes: FileHashes) -> None:
        """New contents to run, and files whose content was handled: by the ledger, in this
        session (a failure), or by another file of this batch."""
        keys = {name: watch_key(self.project, name) for name in self.tasks}
        arrivals, repeats = self.arrivals, self.repeats
        first: dict[tuple[str, str], Arrival] = {}
        for rel in ready:
            for name, task in self.tasks.items():
                if not any(globs.match(g, rel) for g in task.watch):
                    continue
                stat = stat_key(os.path.join(self.root, rel))
                if stat is None or self.seen.handled.get((name, rel)) == stat:
                    continue
                why = self._not_a_job(task, rel)
                if why is not None:
                    self.seen.handled[(name, rel)] = stat  # said once, until it changes
                    self.progress.message(f"claw watch: {name}: {rel} {why}")
                    continue
                content = hashes.hash(rel)
                if content is None:
                    continue
                arrival = Arrival(name, rel, content, stat)
                known = ledger.get(name, content, keys[name]) if ledger else None
                if known is not None and known.status == "ok":
                    repeats[arrival] = known
                elif (name, content, keys[name]) in self.seen.failed:
                    repeats[arrival] = None
                elif (name, content) in first:
                    repeats[arrival] = first[(name, content)]
                else:
                    first[(name, content)] = arrival
                    arrivals.append(arrival)

    def _not_a_job(self, task: Task, rel: str) -> str | None:
        """Why a watched file is none of the task's jobs, if it is not."""
        if not any(globs.match(g, rel) for g in task.item_globs):
            return (
                f"is watched but is not one of its items (foreach: {task.foreach}); "
                "nothing to run for it"
            )
        real = os.path.realpath(os.path.join(self.root, rel))
        if os.path.commonpath([self.real_root, real]) != self.real_root:
            # What `claw run` and the rescan never see (glob_files): no job reads it.
            return (
                f"resolves to {real}, outside the project; it is not processed "
                "(watched files must be inside the project)"
            )
        return None

    def _settle_repeats(self) -> None:
        """Files whose content was handled before this batch: said, and moved like it was."""
        for a, known in self.repeats.items():
            if isinstance(known, Handled):
                self._say(a, f"the same content as {known.path} (run {known.run_id}): done already")
                self._finish(a, "ok")
            elif known is None:
                self._say(a, "its content failed before; change the file or restart to retry")
                self._finish(a, "failed")

    def _record(self, summary: RunSummary) -> None:
        """Under the project lock, after the run: the ledger, then the moves."""
        arrivals, repeats = self.arrivals, self.repeats
        results = {(r.job.task, r.job.item): r for r in summary.results}
        outcome = {a: self._outcome(a, results.get((a.task, a.rel))) for a in arrivals}
        for a, known in repeats.items():
            if isinstance(known, Arrival) and outcome.get(known):
                self._say(a, f"the same content as {known.rel}, in this run")
                outcome[a] = outcome[known]
        keys = {name: watch_key(self.project, name) for name in self.tasks}
        at = now_for_run(self.environ).isoformat(timespec="seconds")
        rows = [
            Handled(a.task, a.content, keys[a.task], o, a.rel, summary.run_id, at)
            for a, o in outcome.items()
            if o and a in arrivals
        ]
        state = State(self.project.root / ".claw" / "state.db")
        try:
            WatchLedger(state).record(rows)
        finally:
            state.close()
        for a, o in outcome.items():
            if o == "failed":
                self.seen.failed.add((a.task, a.content, keys[a.task]))
            if o:
                self._finish(a, o)

    def _outcome(self, a: Arrival, result: JobResult | None) -> str:
        """ok: its content is processed; failed: its job failed; "": neither (not run)."""
        if result is None:
            return ""
        if result.reason == "ModelError":  # the endpoint failed, not this content
            self._say(
                a,
                "not processed: the model endpoint failed; it stays where it is and is tried "
                f"again at the next rescan (every {self.rescan:g} s)",
            )
            return ""
        if result.status == "modified":  # an output edited by hand is kept: the job did not run
            if all(reason.endswith(KEPT) for reason in result.reasons):
                return "ok"  # and nothing else changed since it ran for this content
            self._say(
                a,
                "not processed: its output was edited by hand since claw wrote it, and is "
                "kept; move the edit aside, then change the file or restart claw watch",
            )
            return "failed"
        return "ok" if result.status in DONE else "failed" if result.status in FAILED else ""

    def _finish(self, a: Arrival, outcome: str) -> None:
        """The file is handled: remember it as it is, and move it where the task says."""
        self.seen.handled[(a.task, a.rel)] = a.stat
        task = self.project.config.tasks[a.task]
        folder = task.done if outcome == "ok" else task.failed
        if folder is None:
            return
        try:
            moved = move_into(self.project.root, a.rel, folder, stat=a.stat)
        except OSError as e:
            self.progress.message(f"claw watch: cannot move {a.rel} to {folder}/: {e}")
            return
        if moved is None:
            self._say(a, "changed since it was handed over: not moved; it is handled again")
            return
        self.seen.handled.pop((a.task, a.rel), None)
        self.progress.message(f"claw watch: {a.rel} -> {moved}")

    def _say(self, a: Arrival, text: str) -> None:
        self.progress.message(f"claw watch: {a.task}[{a.rel}]: {text}")

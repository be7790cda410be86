"""`claw watch`: run watch tasks as files arrive in their folders.

watchdog reports writes; a file is handed over once it has settled (`settle`). Settled files
go through the make engine as one `claw run` of just their jobs (the project lock, the
fingerprints, `-j`), and each file's content is recorded in the watch ledger, so the same
bytes are processed once per task — dropped again or under another name, they are not
processed again until the task or its prompt changes. A content whose job failed is not
retried while this `claw watch` runs (change the file, or start it again). A rescan every
`rescan` seconds finds what the OS did not report (and, at start, what arrived while nothing
watched). Processed files can be moved to the task's `done:` folder, failed ones to `failed:`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from claw_batch import globs
from claw_batch.clock import now_for_run
from claw_batch.config import Project, Task
from claw_batch.errors import ClawError, Interrupted, UsageError
from claw_batch.plan.jobs import Job, glob_files, select_tasks
from claw_batch.plan.uptodate import KEPT
from claw_batch.run.results import JobResult, RunSummary
from claw_batch.run.runner import Runner, RunOptions
from claw_batch.store.filehash import FileHashes
from claw_batch.store.state import State
from claw_batch.terminal.progress import Progress
from claw_batch.triggers.settle import Settling, StatKey, ignored, stat_key
from claw_batch.triggers.watchfs import EventHandler, alive, directories, move_into
from claw_batch.triggers.watchledger import Handled, WatchLedger, watch_key

TICK = 0.05  # seconds between looks at new events
LOCKED_RETRY = 1.0  # seconds before files are tried again when another run holds the project
DONE = frozenset({"ok", "up-to-date"})  # the content is processed
FAILED = frozenset({"failed", "limit", "skipped"})  # it failed (or its upstream did)


@dataclass(frozen=True)
class WatchOptions:
    settle: float = 1.0  # seconds without writes before a file is handed over
    rescan: float = 30.0  # seconds between rescans of the watched globs


@dataclass(frozen=True)
class Clock:
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class _Arrival:
    task: str
    rel: str
    content: str
    stat: StatKey


class Watcher:
    def __init__(
        self,
        project: Project,
        options: RunOptions,
        watch: WatchOptions,
        *,
        progress: Progress,
        environ: dict[str, str],
        reload: Callable[[], Project] | None = None,
        clock: Clock = Clock(),
    ) -> None:
        self.project = project
        self.options = options
        self.watch = watch
        self.progress = progress
        self.environ = environ
        self.reload = reload
        self.clock = clock
        self.root = str(project.root)
        self.real_root = os.path.realpath(project.root)
        self.names = _watch_tasks(project, options.targets)
        self.settling = Settling(watch.settle, lambda rel: stat_key(os.path.join(self.root, rel)))
        self.events: queue.SimpleQueue[tuple[str, float]] = queue.SimpleQueue()
        self.handled: dict[tuple[str, str], StatKey] = {}  # (task, file): as it was handled
        self.failed: set[tuple[str, str, str]] = set()  # (task, content, key) this session
        # directory -> (its watch, recursive, the directory's inode)
        self.watched: dict[str, tuple[ObservedWatch, bool, int]] = {}
        self.clawfile_stamp = stat_key(str(project.clawfile))

    @property
    def tasks(self) -> dict[str, Task]:
        return {name: self.project.config.tasks[name] for name in self.names}

    def serve(self, until: Callable[[], bool] | None = None) -> int:
        """Watch until SIGTERM or Ctrl-C (exit 0; 130 when it interrupted running jobs), or
        until `until()` says so (tests)."""
        listing = "; ".join(f"{n} ({', '.join(t.watch)})" for n, t in self.tasks.items())
        self.progress.message(f"claw watch: {listing}; settle {self.watch.settle:g} s")
        observer = Observer()
        observer.start()
        try:
            import openai  # noqa: F401  # now, and not in the first file's latency

            return self._loop(observer, until)
        except KeyboardInterrupt:
            self.progress.message("claw watch: stopped")
            return 0
        finally:
            observer.stop()
            observer.join()

    def _loop(self, observer: BaseObserver, until: Callable[[], bool] | None) -> int:
        next_rescan = 0.0
        while until is None or not until():
            now = self.clock.now()
            reloaded = self._maybe_reload()
            # A directory came or went, or the globs changed: watch what exists now, look again.
            if self._drain() or reloaded:
                next_rescan = now
            if now >= next_rescan:
                self._observe(observer)
                self.rescan(now)
                next_rescan = now + self.watch.rescan
            ready = self.settling.ready(now)
            if ready:
                code = self.process(ready)
                if code == Interrupted.exit_code:
                    return code
                continue
            self.clock.sleep(TICK)
        return 0

    # --- what changed -------------------------------------------------------------------

    def event(self, path: str, at: float) -> None:
        """A file was written, created or renamed into place, or (with a trailing '/') a
        directory was created or renamed (from watchdog's thread)."""
        self.events.put((path, at))

    def _drain(self) -> bool:
        """Settle what the events name; True when a directory came or went."""
        latest: dict[str, float] = {}
        directories = False
        while True:
            try:
                path, at = self.events.get_nowait()
            except queue.Empty:
                break
            if path.endswith("/"):
                directories = True
                continue
            rel = os.path.relpath(path, self.root)
            if self._wanted(rel):
                latest[rel] = max(at, latest.get(rel, at))
        for rel, at in latest.items():
            self.settling.touch(rel, at)
        return directories

    def rescan(self, now: float) -> None:
        """Every watched file that is neither settling nor handled as it is now; one that
        has not been written for the settle time is handed over at once."""
        quiet = now - self.watch.settle
        wall = time.time()
        for name, task in self.tasks.items():
            for rel in sorted({r for g in task.watch for r in glob_files(self.project.root, g)}):
                if rel in self.settling or ignored(rel):
                    continue
                key = stat_key(os.path.join(self.root, rel))
                if key is None or self.handled.get((name, rel)) == key:
                    continue
                age = wall - key[1] / 1e9
                self.settling.touch(rel, quiet if age >= self.watch.settle else now)

    def _wanted(self, rel: str) -> bool:
        if rel.startswith("..") or ignored(rel):
            return False
        return any(globs.match(g, rel) for t in self.tasks.values() for g in t.watch)

    def _observe(self, observer: BaseObserver) -> None:
        """Watch the directories the globs start in; one that does not exist yet, through
        its nearest parent that does (its creation is an event, and then it is watched)."""
        handler = EventHandler(self.event, self.clock.now)
        for directory, recursive in directories(self.tasks.values()).items():
            path = os.path.join(self.root, directory)
            while not os.path.isdir(path) and path != self.root:
                path, recursive = os.path.dirname(path), False
            try:
                inode = os.stat(path).st_ino
            except FileNotFoundError:
                continue  # gone again: the event that says so brings us back here
            known = self.watched.get(path)
            if known is not None:
                # A directory deleted (its watch stopped) or replaced by another: watch anew.
                if known[1] >= recursive and known[2] == inode and alive(observer, known[0]):
                    continue
                del self.watched[path]
                observer.unschedule(known[0])  # else schedule() would hand back the dead watch
            with contextlib.suppress(FileNotFoundError):
                watch = observer.schedule(handler, path, recursive=recursive)
                self.watched[path] = (watch, recursive, inode)

    # --- handing files over ---------------------------------------------------------------

    def process(self, ready: list[str]) -> int:
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
            arrivals, repeats = self._sort(ready, ledger, hashes)
            hashes.save()
        finally:
            if state:
                state.close()
        self._settle_repeats(repeats)
        if not arrivals:
            return 0
        jobs = tuple(Job(a.task, a.rel) for a in arrivals)
        options = dataclasses.replace(
            self.options, targets=tuple(dict.fromkeys(a.task for a in arrivals)), only=jobs
        )
        runner = Runner(self.project, options, progress=self.progress, environ=self.environ)
        summary = runner.run(then=lambda s: self._record(s, arrivals, repeats))
        self.progress.finish()
        if summary.error:
            self.progress.message(f"claw: {summary.error}")
        if summary.exit_code == 75:  # another run holds the project: try again soon
            retry = self.clock.now() - self.watch.settle + LOCKED_RETRY
            for a in arrivals:
                self.settling.touch(a.rel, retry)
        return summary.exit_code

    def _sort(
        self, ready: list[str], ledger: WatchLedger | None, hashes: FileHashes
    ) -> tuple[list[_Arrival], dict[_Arrival, Handled | _Arrival | None]]:
        """New contents to run, and files whose content was handled: by the ledger, in this
        session (a failure), or by another file of this batch."""
        keys = {name: watch_key(self.project, name) for name in self.names}
        arrivals: list[_Arrival] = []
        first: dict[tuple[str, str], _Arrival] = {}
        repeats: dict[_Arrival, Handled | _Arrival | None] = {}
        for rel in ready:
            for name, task in self.tasks.items():
                if not any(globs.match(g, rel) for g in task.watch):
                    continue
                stat = stat_key(os.path.join(self.root, rel))
                if stat is None or self.handled.get((name, rel)) == stat:
                    continue
                why = self._not_a_job(task, rel)
                if why is not None:
                    self.handled[(name, rel)] = stat  # said once, until it changes
                    self.progress.message(f"claw watch: {name}: {rel} {why}")
                    continue
                content = hashes.hash(rel)
                if content is None:
                    continue
                arrival = _Arrival(name, rel, content, stat)
                known = ledger.get(name, content, keys[name]) if ledger else None
                if known is not None and known.status == "ok":
                    repeats[arrival] = known
                elif (name, content, keys[name]) in self.failed:
                    repeats[arrival] = None
                elif (name, content) in first:
                    repeats[arrival] = first[(name, content)]
                else:
                    first[(name, content)] = arrival
                    arrivals.append(arrival)
        return arrivals, repeats

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

    def _settle_repeats(self, repeats: dict[_Arrival, Handled | _Arrival | None]) -> None:
        """Files whose content was handled before this batch: said, and moved like it was."""
        for a, known in repeats.items():
            if isinstance(known, Handled):
                self._say(a, f"the same content as {known.path} (run {known.run_id}): done already")
                self._finish(a, "ok")
            elif known is None:
                self._say(a, "its content failed before; change the file or restart to retry")
                self._finish(a, "failed")

    def _record(
        self,
        summary: RunSummary,
        arrivals: list[_Arrival],
        repeats: dict[_Arrival, Handled | _Arrival | None],
    ) -> None:
        """Under the project lock, after the run: the ledger, then the moves."""
        results = {(r.job.task, r.job.item): r for r in summary.results}
        outcome = {a: self._outcome(a, results.get((a.task, a.rel))) for a in arrivals}
        for a, known in repeats.items():
            if isinstance(known, _Arrival) and outcome.get(known):
                self._say(a, f"the same content as {known.rel}, in this run")
                outcome[a] = outcome[known]
        keys = {name: watch_key(self.project, name) for name in self.names}
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
                self.failed.add((a.task, a.content, keys[a.task]))
            if o:
                self._finish(a, o)

    def _outcome(self, a: _Arrival, result: JobResult | None) -> str:
        """ok: its content is processed; failed: its job failed; "": neither (not run)."""
        if result is None:
            return ""
        if result.reason == "ModelError":  # the endpoint failed, not this content
            self._say(
                a,
                "not processed: the model endpoint failed; it stays where it is and is tried "
                f"again at the next rescan (every {self.watch.rescan:g} s)",
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

    def _finish(self, a: _Arrival, outcome: str) -> None:
        """The file is handled: remember it as it is, and move it where the task says."""
        self.handled[(a.task, a.rel)] = a.stat
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
        self.handled.pop((a.task, a.rel), None)
        self.progress.message(f"claw watch: {a.rel} -> {moved}")

    def _say(self, a: _Arrival, text: str) -> None:
        self.progress.message(f"claw watch: {a.task}[{a.rel}]: {text}")

    def _maybe_reload(self) -> bool:
        """A clawfile edited while watching is read again (True); a broken one is reported
        and the last good one kept."""
        stamp = stat_key(str(self.project.clawfile))
        if self.reload is None or stamp == self.clawfile_stamp:
            return False
        self.clawfile_stamp = stamp
        try:
            project = self.reload()
            names = _watch_tasks(project, self.options.targets)
        except ClawError as e:
            self.progress.message(f"claw watch: {e}\nclaw watch: keeping the clawfile as it was")
            return False
        self.project, self.names = project, names
        self.progress.message("claw watch: clawfile changed; read it again")
        return True


def _watch_tasks(project: Project, targets: tuple[str, ...]) -> list[str]:
    config = project.config
    chosen = select_tasks(config, targets) if targets else list(config.tasks)
    names = [name for name in chosen if config.tasks[name].watch]
    if not names:
        which = "the chosen tasks" if targets else "the clawfile"
        raise UsageError(f"no task in {which} has watch: globs; nothing for claw watch to do")
    return names

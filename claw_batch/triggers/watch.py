"""`claw watch`: run watch tasks as files arrive in their folders.

watchdog reports writes; a file is handed over once it has settled (`settle`), a batch of
settled files at a time (claw_batch.triggers.handover: each content once per task, through
one `claw run` of just their jobs). A rescan every `rescan` seconds finds what the OS did not
report (and, at start, what arrived while nothing watched); a directory that comes or goes
is watched anew, and a clawfile edited meanwhile is read again.
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
from claw_batch.config import Project, Task
from claw_batch.errors import ClawError, Interrupted, Locked, UsageError
from claw_batch.plan.jobs import glob_files, select_tasks
from claw_batch.run.runner import RunOptions
from claw_batch.terminal.progress import Progress
from claw_batch.triggers.handover import Batch, Seen
from claw_batch.triggers.settle import Settling, ignored, stat_key
from claw_batch.triggers.watchfs import EventHandler, alive, directories

TICK = 0.05  # seconds between looks at new events
LOCKED_RETRY = 1.0  # seconds before files are tried again when another run holds the project


@dataclass(frozen=True)
class WatchOptions:
    settle: float = 1.0  # seconds without writes before a file is handed over
    rescan: float = 30.0  # seconds between rescans of the watched globs


@dataclass(frozen=True)
class Clock:
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


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
        self.options = dataclasses.replace(options, trigger="watch")
        self.watch = watch
        self.progress = progress
        self.environ = environ
        self.reload = reload
        self.clock = clock
        self.root = str(project.root)
        self.names = _watch_tasks(project, options.targets)
        self.settling = Settling(watch.settle, lambda rel: stat_key(os.path.join(self.root, rel)))
        self.events: queue.SimpleQueue[tuple[str, float]] = queue.SimpleQueue()
        self.seen = Seen()  # what this claw watch has handled
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
        observer = Observer()
        try:  # a stop from the first line on is a clean stop (exit 0), even before the loop
            self.progress.message(f"claw watch: {listing}; settle {self.watch.settle:g} s")
            observer.start()
            from claw_batch.llm import openai_compat  # noqa: F401  # now, not in the first file's latency

            return self._loop(observer, until)
        except KeyboardInterrupt:
            self.progress.message("claw watch: stopped")
            return 0
        finally:
            observer.stop()
            if observer.is_alive():  # not when the stop came before it started
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
                if key is None or self.seen.handled.get((name, rel)) == key:
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

    def process(self, ready: list[str]) -> int:
        """Hand the settled files over (claw_batch.triggers.handover); returns the run's exit
        code (0 when nothing ran)."""
        batch = Batch(
            self.project,
            self.names,
            self.options,
            progress=self.progress,
            environ=self.environ,
            seen=self.seen,
            rescan=self.watch.rescan,
        )
        code = batch.run(ready)
        if code == Locked.exit_code:  # another run holds the project: try again soon
            retry = self.clock.now() - self.watch.settle + LOCKED_RETRY
            for a in batch.arrivals:
                self.settling.touch(a.rel, retry)
        return code

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

"""What `claw watch` asks of the filesystem: where to watch (the directories the globs start
in), watchdog's callback, whether a watch still runs, and moving a processed file into its
`done:` or `failed:` folder without overwriting anything."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.api import BaseObserver, ObservedWatch

from claw_batch import globs
from claw_batch.config import Task
from claw_batch.triggers.settle import StatKey, stat_key


def directories(tasks: Iterable[Task]) -> dict[str, bool]:
    """Where each watch glob starts (its directories before the first wildcard), and
    whether files below it in subdirectories can match."""
    found: dict[str, bool] = {}
    for task in tasks:
        for glob in task.watch:
            directory = globs.fixed_dir(glob)
            below = glob[len(directory) + 1 :] if directory != "." else glob
            recursive = "/" in below or "**" in below
            found[directory] = found.get(directory, False) or recursive
    return found


def move_into(root: Path, rel: str, folder: str, stat: StatKey | None = None) -> str | None:
    """Move a project file into a project folder under its own name, or with `.1`, `.2`...
    before its suffix when that name is taken: nothing is overwritten (a hard link claims
    the name atomically; the original name is unlinked after). With `stat`, only that
    file as it was then is moved: when another file has taken its name since (a new drop),
    or it was written to, nothing is moved and None returned. Returns where it went."""
    real_root = os.path.realpath(root)
    target = os.path.realpath(os.path.join(root, folder))
    if os.path.commonpath([real_root, target]) != real_root:
        raise OSError(f"{folder} resolves to {target}, outside the project")
    os.makedirs(target, exist_ok=True)
    source = os.path.join(root, rel)
    stem, dot, suffix = os.path.basename(rel).partition(".")
    for n in range(10_000):
        name = f"{stem}.{n}{dot}{suffix}" if n else os.path.basename(rel)
        destination = os.path.join(target, name)
        try:
            os.link(source, destination)
        except FileExistsError:
            continue
        if stat is not None and stat_key(destination) != stat:
            os.unlink(destination)  # a new file or new content: it has its own turn
            return None
        if stat is None or os.stat(source).st_ino == stat[2]:
            os.unlink(source)
        return os.path.relpath(destination, real_root)
    raise OSError(f"{folder}/ holds 10,000 files named like {os.path.basename(rel)}")


def alive(observer: BaseObserver, watch: ObservedWatch) -> bool:
    """False once the directory a watch started in was deleted: its emitter stops itself."""
    return any(e.watch == watch and e.should_keep_running() for e in observer.emitters)


class EventHandler(FileSystemEventHandler):
    """watchdog's callback: a file was written, created, or renamed into place."""

    def __init__(self, report: Callable[[str, float], None], now: Callable[[], float]) -> None:
        self.report = report
        self.now = now

    def dispatch(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            if event.event_type in ("created", "moved", "deleted"):
                self.report(os.fsdecode(event.src_path) + "/", self.now())
            return
        if event.event_type in ("created", "modified", "closed"):
            self.report(os.fsdecode(event.src_path), self.now())
        elif event.event_type == "moved":
            self.report(os.fsdecode(event.dest_path), self.now())

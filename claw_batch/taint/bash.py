"""A job's bash commands and the outside content they touch (claw_batch.taint.jobtaint asks
this around each command of a job whose writes are recorded).

A tainted job's command taints every file it made or changed in its write directories. An
untainted job's is watched (claw_batch.taint.watch): when it read outside content, its
output is fenced, the job is tainted and so is what the call wrote; outside content it
renamed, linked or changed without reading stays tainted. Outside content that landed while
it ran (another job's, under -j) was not watched: the command counts as having read it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from claw_batch.errors import ToolError
from claw_batch.safety.untrusted import printable
from claw_batch.taint import watch as taintwatch
from claw_batch.taint.outside import outside_now
from claw_batch.toolnames import READ_ONLY_TOOLS

if TYPE_CHECKING:
    from claw_batch.taint.ledger import Moment, TaintedFiles, Writer
    from claw_batch.taint.outside import Outside

UNWATCHABLE = (
    "refused: bash: the project holds outside content ({source}) and claw cannot watch "
    "whether a command reads it ({why}), so this job counts as having read it and may use "
    f"only read-only tools ({', '.join(READ_ONLY_TOOLS)}); its task can grant more with "
    "untrusted: {{allow: [bash]}}"
)
LANDED = "outside content another job wrote meanwhile"
CLOCK_REALTIME_COARSE = 5  # Linux's clock id; the time module does not name it
UNMARKED = (
    "claw could not record {paths} as outside content ({error}); a job that reads them "
    "may not get them fenced: move them aside or delete them"
)


def joined(sources: list[str]) -> str | None:
    """What a mark or a refusal says the job read: the first source, and how many more."""
    if not sources:
        return None
    return sources[0] + (f" and {len(sources) - 1} more" if len(sources) > 1 else "")


class BashTaint:
    """Around the bash commands of one job: what they taint, what they read."""

    def __init__(
        self,
        files: TaintedFiles,
        writer: Writer,
        dirs: tuple[str, ...],
        allow: frozenset[str],
        saw: Callable[[str], None],
    ) -> None:
        self.files = files
        self.writer = writer  # the job, for the ledger's rows
        self.dirs = dirs  # where its commands may write ("" is the project root)
        self.allow = allow  # the task's `untrusted.allow`
        self.saw = saw  # the job has read this outside content (JobTaint.saw)
        self._watch: taintwatch.Watch | None = None  # the command being run (`watching`)

    def tainted(self, source: str, root: str, invoke: Callable[[], str]) -> str:
        """A tainted job's command: every file it made or changed in its write directories
        is tainted too."""
        return tainting(self.files, self.writer, source, root, self.dirs, invoke)

    def watched(self, root: str, invoke: Callable[[], str]) -> tuple[str, str | None]:
        """An untainted job's command, watched: its output, and the outside content it read
        (None: none), which the job is tainted with; the taint it left is recorded."""
        files = self.files
        moment = files.moment()  # before the listing: what lands after it, `since` says
        outside = outside_now(root, files, self.dirs)
        if outside is None:
            return self._unwatched(root, invoke, moment)
        before = taintwatch.walk(root, self.dirs)
        watch = self._watch = taintwatch.Watch(root, outside)
        try:
            output = invoke()
        finally:
            self._watch = None
            read, failed = self._settle(root, before, watch, moment)
        _unmarked(failed)
        return output, read

    def _unwatched(
        self, root: str, invoke: Callable[[], str], moment: Moment
    ) -> tuple[str, str | None]:
        """A command started when the project held no outside content: shown as it is,
        unless another job's outside content landed while it ran (under -j); then it counts
        as read, and what the command may have written since it started is tainted."""
        # The kernel stamps ctimes from its coarse clock: a change after this is not older.
        start = time.clock_gettime_ns(CLOCK_REALTIME_COARSE)
        output = invoke()
        landed = self.files.since(moment)
        if landed is None:
            return output, None
        read = joined(landed) or LANDED
        self.saw(read)
        after = taintwatch.walk(root, self.dirs)
        changed = [r for r, k in after.items() if k[4] >= start]
        _unmarked(_mark_all(self.files, self.writer, read, changed))
        return output, read

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Around the command itself, not what claw does to prepare its sandbox (the bash
        tool's part of `watched`). Where nothing can be watched, the job counts as having
        read the project's outside content: bash is refused unless its task grants it."""
        watch = self._watch
        if watch is None:
            yield
            return
        try:
            watch.start()
        except taintwatch.Unwatchable as e:
            watch.seen, watch.blind = taintwatch.Seen(), True
            source = joined(watch.outside.shown())
            self.saw(source or "outside content")
            if "bash" not in self.allow:
                raise ToolError(UNWATCHABLE.format(source=source, why=e)) from None
            yield
            return
        try:
            yield
        finally:
            watch.seen = watch.stop()

    def _settle(
        self,
        root: str,
        before: dict[str, taintwatch.Key],
        watch: taintwatch.Watch,
        moment: Moment,
    ) -> tuple[str | None, list[str]]:
        """After a watched command: what it read (None: nothing), with the taint it leaves;
        and what could not be marked. Outside content that landed while it ran (another
        job's, under -j) was not watched: the command counts as having read it."""
        seen, outside, dirs = watch.seen, watch.outside, self.dirs
        if seen is None:
            return None, []  # the command never started
        landed = self.files.since(moment)
        if not (seen.read or watch.blind or landed is not None):
            kept = self._kept(root, seen, outside)
            if not kept:
                return None, []
            landed = []  # a taint it left could not be recorded: as if it read it all
        read = ", ".join(sorted(seen.read)) or joined(landed or outside.shown()) or LANDED
        self.saw(read)
        return read, _mark_changed(self.files, self.writer, read, root, dirs, before)

    def _kept(self, root: str, seen: taintwatch.Seen, outside: Outside) -> list[str]:
        """Outside content a command changed or moved without reading it stays tainted;
        what could not be marked."""
        marks = [(rel, outside.files[rel]) for rel in sorted(seen.changed)]  # truncated
        if seen.moved:  # renamed or linked: found again by inode
            for rel, key in sorted(taintwatch.walk(root, self.dirs).items()):
                origin = outside.inodes.get((key[3], key[2]))
                if origin is not None:
                    marks.append((rel, outside.files[origin]))
        failed = []
        for rel, source in marks:
            if not self.files.outside(rel):
                failed += _mark_all(self.files, self.writer, source, [rel])
        return failed


def tainting(
    files: TaintedFiles,
    writer: Writer,
    source: str,
    root: str,
    dirs: tuple[str, ...],
    invoke: Callable[[], str],
) -> str:
    """Around something outside claw that may write `dirs` (a tainted job's command, an MCP
    server's call): every file it made or changed there is tainted with `source`."""
    before = taintwatch.walk(root, dirs)
    with files.unmarked():
        try:
            output = invoke()
        finally:
            failed = _mark_changed(files, writer, source, root, dirs, before)
    _unmarked(failed)
    return output


def _mark_changed(
    files: TaintedFiles,
    writer: Writer,
    source: str,
    root: str,
    dirs: tuple[str, ...],
    before: dict[str, taintwatch.Key],
) -> list[str]:
    """Every file under `dirs` that is new or changed since `before` is tainted; what
    could not be marked (with why)."""
    after = taintwatch.walk(root, dirs)
    return _mark_all(files, writer, source, [r for r, k in after.items() if before.get(r) != k])


def _mark_all(files: TaintedFiles, writer: Writer, source: str, paths: list[str]) -> list[str]:
    """Each file marked, whatever becomes of the others: a failure does not stop the rest."""
    failed = []
    for rel in sorted(paths):
        try:
            files.mark_file(rel, source, writer)
        except Exception as e:  # a full disk, a broken ledger: said once all are tried
            failed.append(f"{printable(rel)}: {e}")
    return failed


def _unmarked(failed: list[str]) -> None:
    if failed:
        paths = ", ".join(f.split(": ", 1)[0] for f in failed)
        raise ToolError(UNMARKED.format(paths=paths, error=failed[0].split(": ", 1)[1]))

"""Which project files hold outside content: the watched ones (`Clawfile.untrusted`) and
those the ledger's `tainted` table names (its schema is in claw_batch.store.schema).

A row says that a job which had read outside content wrote `path` with the content
`sha256`. The file is tainted while it has that content: the taint belongs to the bytes the
job produced, not to the name. So it ends when a person edits the file (what they keep,
they vouch for), and when a job that read no outside content rewrites it (the row goes:
even the very same bytes, written by that job, came from what the project owns). A copy
made outside claw is not tainted; a rerun of a tainted job that writes new content taints
the new content.

A row is written before the file it is about (and durably: see `State.transaction`), so a
run killed between the two leaves a row for content that never landed, never a tainted file
without its row. The rows are loaded the first time a run asks about a file: a no-op whose
jobs pass the quick check never does.

Each tainted content's git blob ids are kept too (table `tainted_blobs`), after the file
changes, as git keeps the content: what a command could reach of it (claw_batch.taint.outside).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from claw_batch import globs
from claw_batch.safety.untrusted import printable
from claw_batch.store.schema import loaded_path, stored_path
from claw_batch.taint.staged import Copy, Staged, StagedFiles, file_blob_ids

if TYPE_CHECKING:
    from claw_batch.store.state import State


@dataclass(frozen=True)
class Writer:
    """The job a row is about: what `claw why`-style questions and a reader of the ledger
    need to find where a tainted file came from."""

    task: str
    item: str
    run_id: str


UNREADABLE = "unreadable"  # a row's sha256 when the file could not be hashed (`mark_file`)


@dataclass(frozen=True)
class Row:
    sha256: str
    source: str


@dataclass(frozen=True)
class Moment:
    events: int
    marked: int
    busy: bool  # a tainted job's command was running


class TaintedFiles:
    """One run's answer to "is this file outside content?" — for every job, in every thread."""

    def __init__(
        self,
        state: State | None,
        untrusted: tuple[str, ...],
        hash_file: Callable[[str], str | None],
        root: str | None = None,
    ) -> None:
        self.state = state  # None: a dry run of a new project, nothing recorded yet
        self.root = root  # for the staged copies (None: `outside` does not ask git)
        self.untrusted = untrusted  # the watch globs and the folders around them
        self.hash_file = hash_file  # project-relative path -> sha256 (None: missing)
        self._rows: dict[str, Row] | None = None
        self._blobs: dict[str, str] | None = None
        self._lock = threading.Lock()
        # What commands running meanwhile must learn of (`moment`, `since`): each mark, and
        # each tainted job's command, whose files are outside content before they are marked.
        self._marked: list[str] = []  # every path marked in this run, in order
        self._events = 0  # marks, and tainted commands starting and ending
        self._busy = 0  # tainted commands running
        self.git = StagedFiles()

    def outside(self, rel: str) -> bool:
        """Whether the project-relative file is outside content: watched, tainted, or the
        working-tree copy of a staged file."""
        untrusted = self.untrusted
        if (untrusted and any(globs.match(g, rel) for g in untrusted)) or self.tainted(rel):
            return True
        return self.root is not None and self.git.is_copy(self.root, rel)

    def any_outside(self, rels: Iterable[str]) -> bool:
        """Whether any of the files is outside content (a listing's entries): the index is
        looked at once for all, and git's copies only while something is staged."""
        root = self.root
        found = None if root is None else self.git.now(root)
        copies = found is not None and bool(found.copies)
        untrusted = self.untrusted
        rows = self.rows  # added to in place: a mark made meanwhile is seen
        for rel in rels:  # a listing's every entry: only what can say yes is looked at
            if untrusted and any(globs.match(g, rel) for g in untrusted):
                return True
            if rel in rows and self.tainted(rel):
                return True
            if copies and self.git.is_copy(root or "", rel, found):
                return True
        return False

    def tainted(self, rel: str) -> bool:
        """Whether a tainted job wrote the file as it is now (it is hashed only if one did)."""
        return self.source(rel) is not None

    def source(self, rel: str) -> str | None:
        """What outside content the file holds as it is now (None: it is not tainted)."""
        row = self.rows.get(rel)
        if row is None:
            return None
        if row.sha256 == UNREADABLE:  # what it held is not known: until a job rewrites it
            return row.source
        try:
            return row.source if self.hash_file(rel) == row.sha256 else None
        except OSError:  # unreadable now (its mode): what it holds may still be that
            return row.source

    def staged(self, root: str) -> Staged:
        """What is staged now (claw_batch.taint.staged; git runs once per index)."""
        return self.git.now(root)

    def copies(self, root: str, staged: Staged) -> list[tuple[str, Copy]]:
        """The staged files whose working-tree copy is what is staged."""
        return self.git.copies(root, staged)

    @property
    def rows(self) -> dict[str, Row]:
        with self._lock:
            if self._rows is None:
                self._rows = self._load()
            return self._rows

    @property
    def blobs(self) -> dict[str, str]:
        """The git blob ids of all content ever tainted -> the file it was, as shown."""
        with self._lock:
            if self._blobs is None:
                self._blobs = self._load_blobs()
            return self._blobs

    def _load_blobs(self) -> dict[str, str]:
        state = self.state
        if state is None or not state.has_table("tainted_blobs"):
            return {}
        return {r[0]: r[1] for r in state.select("SELECT blob, path FROM tainted_blobs")}

    def _load(self) -> dict[str, Row]:
        state = self.state
        if state is None or (state.readonly and not state.has_table("tainted")):
            return {}
        found = state.select("SELECT path, sha256, source FROM tainted")
        return {loaded_path(r[0]): Row(r[1], r[2]) for r in found}

    def mark(
        self, rel: str, sha256: str, source: str, writer: Writer, blobs: tuple[str, ...] = ()
    ) -> None:
        """Record that `rel` will hold outside content with this hash (and these git blob
        ids: `staged.blob_ids`): before it is written."""
        rows, known = self.rows, self.blobs
        if self.state is not None:
            with self.state.transaction(durable=True):
                self.state.db.execute(
                    "INSERT OR REPLACE INTO tainted VALUES (?, ?, ?, ?, ?, ?)",
                    (stored_path(rel), sha256, source, writer.task, writer.item, writer.run_id),
                )
                self.state.db.executemany(
                    "INSERT OR IGNORE INTO tainted_blobs VALUES (?, ?)",
                    [(b, printable(rel)) for b in blobs],
                )
        with self._lock:
            rows[rel] = Row(sha256, source)
            for blob in blobs:
                known.setdefault(blob, printable(rel))
            self._marked.append(rel)
            self._events += 1

    def moment(self) -> Moment:
        """Now, for `since`: taken before a command starts."""
        with self._lock:
            return Moment(self._events, len(self._marked), self._busy > 0)

    def since(self, moment: Moment) -> list[str] | None:
        """The paths marked since `moment` (by other jobs: under -j), or [] when a tainted
        job's command was writing files not yet marked; None: nothing of the kind."""
        with self._lock:
            if self._events == moment.events and not moment.busy and not self._busy:
                return None
            return list(dict.fromkeys(self._marked[moment.marked :]))

    @contextmanager
    def unmarked(self) -> Iterator[None]:
        """Around a tainted job's command: what it writes is outside content before it is
        marked after it, so a command that runs meanwhile counts as having read some."""
        with self._lock:
            self._busy += 1
            self._events += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                self._events += 1

    def mark_file(self, rel: str, source: str, writer: Writer) -> None:
        """Record that the file as it is now holds outside content (what bash wrote); one
        claw cannot read (a command took its read permission) is tainted whatever it holds."""
        try:
            sha256 = self.hash_file(rel)
        except OSError:
            sha256 = UNREADABLE
        if sha256 is not None:
            blobs = file_blob_ids(os.path.join(self.root, rel)) if self.root else ()
            self.mark(rel, sha256, source, writer, blobs)

    def clear(self, rel: str) -> None:
        """Forget the path's row: an untainted job has written it (after it did)."""
        rows = self.rows
        if rel not in rows:
            return
        if self.state is not None:
            with self.state.transaction():
                self.state.db.execute("DELETE FROM tainted WHERE path = ?", (stored_path(rel),))
        with self._lock:
            rows.pop(rel, None)

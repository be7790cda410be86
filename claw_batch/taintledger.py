"""Which project files hold outside content: the watched ones (`Clawfile.untrusted`) and
those the ledger's `tainted` table names (its schema is in state.py).

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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from claw_batch import globs

if TYPE_CHECKING:
    from claw_batch.state import State


@dataclass(frozen=True)
class Writer:
    """The job a row is about: what `claw why`-style questions and a reader of the ledger
    need to find where a tainted file came from."""

    task: str
    item: str
    run_id: str


@dataclass(frozen=True)
class Row:
    sha256: str
    source: str


class TaintedFiles:
    """One run's answer to "is this file outside content?" — for every job, in every thread."""

    def __init__(
        self,
        state: State | None,
        untrusted: tuple[str, ...],
        hash_file: Callable[[str], str | None],
    ) -> None:
        self.state = state  # None: a dry run of a new project, nothing recorded yet
        self.untrusted = untrusted  # the watch globs and the folders around them
        self.hash_file = hash_file  # project-relative path -> sha256 (None: missing)
        self._rows: dict[str, Row] | None = None
        self._lock = threading.Lock()

    def outside(self, rel: str) -> bool:
        """Whether the project-relative file is outside content: watched, or tainted."""
        return any(globs.match(g, rel) for g in self.untrusted) or self.tainted(rel)

    def tainted(self, rel: str) -> bool:
        """Whether a tainted job wrote the file as it is now (it is hashed only if one did)."""
        return self.source(rel) is not None

    def source(self, rel: str) -> str | None:
        """What outside content the file holds as it is now (None: it is not tainted)."""
        row = self.rows.get(rel)
        return row.source if row is not None and self.hash_file(rel) == row.sha256 else None

    def tainted_under(self, dirs: tuple[str, ...]) -> dict[str, str]:
        """The tainted files in these directories ("" is the project root), and their source."""
        inside = [
            rel
            for rel in self.rows
            if any(not d or rel == d or rel.startswith(d + "/") for d in dirs)
        ]
        return {rel: source for rel in inside if (source := self.source(rel)) is not None}

    @property
    def rows(self) -> dict[str, Row]:
        with self._lock:
            if self._rows is None:
                self._rows = self._load()
            return self._rows

    def _load(self) -> dict[str, Row]:
        state = self.state
        if state is None or (state.readonly and not state.has_table("tainted")):
            return {}
        found = state.select("SELECT path, sha256, source FROM tainted")
        return {r[0]: Row(r[1], r[2]) for r in found}

    def mark(self, rel: str, sha256: str, source: str, writer: Writer) -> None:
        """Record that `rel` will hold outside content with this hash: before it is written."""
        rows = self.rows
        if self.state is not None:
            with self.state.transaction(durable=True):
                self.state.db.execute(
                    "INSERT OR REPLACE INTO tainted VALUES (?, ?, ?, ?, ?, ?)",
                    (rel, sha256, source, writer.task, writer.item, writer.run_id),
                )
        with self._lock:
            rows[rel] = Row(sha256, source)

    def mark_file(self, rel: str, source: str, writer: Writer) -> None:
        """Record that the file as it is now holds outside content (what bash wrote)."""
        sha256 = self.hash_file(rel)
        if sha256 is not None:
            self.mark(rel, sha256, source, writer)

    def clear(self, rel: str) -> None:
        """Forget the path's row: an untainted job has written it (after it did)."""
        rows = self.rows
        if rel not in rows:
            return
        if self.state is not None:
            with self.state.transaction():
                self.state.db.execute("DELETE FROM tainted WHERE path = ?", (rel,))
        with self._lock:
            rows.pop(rel, None)

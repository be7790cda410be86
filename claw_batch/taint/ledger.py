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

`outside_now` lists, for a command about to run, every file that holds outside content:
the tainted ones, everything in a watched folder, while something is staged, the git
index, the staged blobs and the working-tree copies that are what is staged, and where the
project is a repository, the objects and packs in which git keeps outside content that was
committed: each tainted content's blob ids are kept (table `tainted_blobs`) after the file
changes, as git keeps the content (claw_batch.taint.staged); claw_batch.taint.watch watches
what the command does with them.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from claw_batch import globs
from claw_batch.safety.untrusted import printable
from claw_batch.store.schema import loaded_path, stored_path
from claw_batch.taint import staged as taintstaged
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
        if any(globs.match(g, rel) for g in self.untrusted) or self.tainted(rel):
            return True
        return self.root is not None and self.git.is_copy(self.root, rel)

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
        ids: `taintstaged.blob_ids`): before it is written."""
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


# --- the outside content a command could reach ---------------------------------------------------

STAGED = "git diff --cached"  # how the staged changes are named, as the template does
NEVER_WALKED = frozenset({".git", ".claw"})  # runner state, git's: no command writes there


@dataclass
class Outside:
    """The outside content of a project as a command is about to run (what
    claw_batch.taint.watch watches)."""

    files: dict[str, str] = field(default_factory=dict)  # path -> what it is read as
    inodes: dict[tuple[int, int], str] = field(default_factory=dict)  # (dev, ino) -> path
    movable: set[str] = field(default_factory=set)  # files the command could rename or link
    dirs: set[str] = field(default_factory=set)  # folders to watch ("" is the root)
    watched: set[str] = field(default_factory=set)  # watched folders: their listing too
    held: bool = False  # a watched folder holds a file: listing one shows outside names
    listed: set[str] = field(default_factory=set)  # other folders whose listing shows some
    # (the folder of every outside file: a tainted job may have chosen its name)
    _tops: dict[str, str | None] = field(default_factory=dict)  # folder -> its write dir

    def shown(self) -> list[str]:
        """Everything it holds, as each is shown."""
        return sorted(set(self.files.values())) or sorted(self.watched)

    def add(
        self, root: str, rel: str, shown: str, writable: tuple[str, ...], *, named: bool = True
    ) -> bool:
        """Count `rel` in, when it is a regular file (whether it was). `named`: its name may
        be outside content too (not git's index, nor a blob named by its hash)."""
        try:
            st = os.lstat(f"{root}/{rel}")
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode):
            return False
        self.files[rel] = printable(shown)  # what the fence and the ledger say it read
        self.inodes[(st.st_dev, st.st_ino)] = rel
        parent = rel.rpartition("/")[0]
        self.dirs.add(parent)
        if named:  # its name is outside content too: a listing of its folder shows it
            self.listed.add(parent)
        if parent not in self._tops:
            self._tops[parent] = next((w for w in writable if _under(parent, w)), None)
        top = self._tops[parent]
        if top is not None or st.st_nlink > 1:
            self.movable.add(rel)
            while top is not None and parent and parent != top:  # renamed, it carries rel
                self.dirs.add(parent)
                parent = parent.rpartition("/")[0]
        return True


def outside_now(root: str, files: TaintedFiles, writable: tuple[str, ...]) -> Outside | None:
    """The project's outside content now, and which of it a command that may write
    `writable` ("" is the root) could rename or link; None when it holds none."""
    found = Outside()
    for rel in list(files.rows):
        if files.source(rel) is not None:
            found.add(root, rel, rel, writable)
    tops = dict.fromkeys(globs.fixed_dir(g) for g in files.untrusted)
    for glob in files.untrusted:
        if globs.fixed_dir(glob) == ".":
            _matches(root, glob, found, writable)
    for top in tops:
        if top != ".":
            _folder(root, top, found, writable)
    staged = files.staged(root)
    for rel in staged.objects:
        found.add(root, rel, STAGED, writable, named=False)
    for rel, copy in files.copies(root, staged):
        found.add(root, rel, rel, writable, named=copy.added)
    if taintstaged.has_objects(root):
        _committed(root, files, found, writable, staged)
    return found if found.files or found.watched else None


def _committed(
    root: str, files: TaintedFiles, found: Outside, writable: tuple[str, ...], staged: Staged
) -> None:
    """Outside content committed: what git's object store holds of it (a `git show`, a
    `git log -p` reads it there). What was ever tainted, as its blob ids were recorded, and
    the outside files as they are now (a watched folder's, a row from before the ids)."""
    blobs = dict(files.blobs)
    length = 64 if taintstaged.sha256_repository(root) else 40
    for rel, shown in list(found.files.items()):
        if rel not in staged.objects:
            blob = files.git.blob_id(root, rel, length)
            if blob is not None:
                blobs.setdefault(blob, shown)
    blobs = {b: shown for b, shown in blobs.items() if len(b) == length}
    for path, shown in taintstaged.stored(root, files.git, blobs).items():
        if path not in found.files:  # a staged blob: read as the staged changes
            found.add(root, path, shown, writable, named=False)


def _folder(root: str, top: str, found: Outside, writable: tuple[str, ...]) -> None:
    """A watched folder: everything in it is outside content, its names included."""
    path = os.path.join(root, top)
    if not _under(os.path.realpath(path), root):
        return  # through a symlink, out of the project: not what commands see there
    for dirpath, _, filenames in os.walk(path):
        rel_dir = os.path.relpath(dirpath, root)
        found.dirs.add(rel_dir)
        found.watched.add(rel_dir)
        for name in filenames:
            rel = f"{rel_dir}/{name}"
            found.held = found.add(root, rel, rel, writable) or found.held


def _matches(root: str, glob: str, found: Outside, writable: tuple[str, ...]) -> None:
    """A watch glob at the root: only what it matches is outside content."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        if not rel_dir:
            dirnames[:] = [d for d in dirnames if d not in NEVER_WALKED]
        if "/" not in glob:
            dirnames.clear()  # it matches root files only
        for name in filenames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if globs.match(glob, rel):
                found.add(root, rel, rel, writable)
                found.listed.add(rel_dir)


def _under(rel: str, top: str) -> bool:
    return not top or rel == top or rel.startswith(top + "/")

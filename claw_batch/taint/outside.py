"""The outside content a command could reach: for a command about to run, every file that
holds some — the tainted ones (claw_batch.taint.ledger), everything in a watched folder,
while something is staged, the git index, the staged blobs and the working-tree copies that
are what is staged, and where the project is a repository, the objects and packs in which
git keeps outside content that was committed (the blob ids of each tainted content are kept
after the file changes, as git keeps the content: claw_batch.taint.staged) — and which of
it the command could rename or link. claw_batch.taint.watch watches what the command does
with them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from claw_batch import globs
from claw_batch.safety.untrusted import printable
from claw_batch.taint import staged as taintstaged
from claw_batch.taint.ledger import TaintedFiles
from claw_batch.taint.staged import Staged

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

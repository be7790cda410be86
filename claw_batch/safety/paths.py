"""Where a tool may read and write: the project root, the write globs and the protected dirs.

Every path is resolved (symlinks included) before it is checked, and containment is decided
on the resolved paths by the root plus a separator, so neither `../proj-evil` (a sibling whose
name starts like the root) nor a symlink pointing outside gets through.
"""

from __future__ import annotations

import functools
import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from claw_batch import globs
from claw_batch.config import CLAWFILE_NAMES
from claw_batch.errors import TaskFailed, ToolError

STATE_DIR = ".claw"
# Nor a file ripgrep obeys in every folder it walks: it would hide files from later greps.
IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")
NEVER_SEARCHED = (".git", STATE_DIR)  # not matched by globs, inputs or fan-out
# Outside the project anyway, but named in the refusal: /proc/self/environ holds the runner's
# keys, /dev/zero never ends, a FIFO or a device can block or act when opened.
KERNEL_FILESYSTEMS = ("/proc", "/sys", "/dev")
_KERNEL_PREFIXES = tuple(f"{top}/" for top in KERNEL_FILESYSTEMS)  # what is under one


@dataclass(frozen=True)
class Policy:
    root: Path
    write_globs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    protected: tuple[str, ...] = (".git", STATE_DIR)  # never written by a tool
    # What decides what later runs do (claw_batch.safety.control): never written by a tool either,
    # but for the paths of it the task names explicitly (`granted`).
    control: tuple[str, ...] = ()
    granted: tuple[str, ...] = ()
    untrusted: tuple[str, ...] = ()  # globs of files from outside (watched): shown fenced
    # The real directories of the skills the task is offered: readable wherever they are
    # (a user's or a built-in skill is outside the project), never writable.
    skill_dirs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", _real(self.root))
        object.__setattr__(self, "outputs", tuple(_clean(o) for o in self.outputs))
        object.__setattr__(self, "protected", tuple(_clean(p) for p in self.protected))
        object.__setattr__(self, "control", tuple(_clean(p) for p in self.control))

    def resolve_read(self, path: str) -> Path:
        real = self._resolve(path, "reading", also=self.skill_dirs)
        if _is_under(self.relative(real), STATE_DIR):
            raise ToolError(
                f"refused: {path} is runner state ({STATE_DIR}/), which tools may not read"
            )
        return real

    def resolve_write(self, path: str) -> Path:
        real = self._resolve(path, "writing")
        rel = self.relative(real)
        shown = rel if rel == _clean(path) else f"{path} (resolves to {rel})"
        if rel == ".":
            raise ToolError(f"refused: {path} is the project root, not a file")
        # What the path names and where it leads: a symlinked control file is both.
        named = (rel, posixpath.normpath(_clean(path))) if not path.startswith("/") else (rel,)
        prot = next((p for p in self.protected for n in named if _is_under(n, p)), None)
        if prot == rel:
            raise ToolError(f"refused: tools may never write {shown}")
        if prot is not None:
            raise ToolError(f"refused: {shown} is under {prot}/, which tools may never write")
        if rel not in self.outputs and not any(globs.match(g, rel) for g in self.write_globs):
            allowed = ", ".join((*self.write_globs, *self.outputs))
            why = (
                f"this task may write only: {allowed}"
                if allowed
                else "this task may not write files"
            )
            raise ToolError(f"refused: writing {shown} is not permitted; {why}")
        ctl = next((c for c in self.control for n in named if _is_under(n, c)), None)
        if ctl is None and posixpath.basename(rel) in (*CLAWFILE_NAMES, *IGNORE_FILES):
            ctl = rel  # `claw run` started in its folder would obey it; grep obeys it anywhere
        if ctl is not None and not set(named) <= set(self.granted):
            what = shown if ctl in named else f"{shown} is under {ctl}/, which"
            raise ToolError(
                f"refused: {what} decides what later runs do: no job may write it unless its "
                "task names the file in permissions.write"
            )
        return real

    @property
    def read_only(self) -> tuple[str, ...]:
        """What no command may change, granted or not (a grant lets the write and edit tools
        change a file's text, which claw checks; a command could make it a symlink)."""
        return (*self.protected, *self.control)

    def is_untrusted(self, rel: str) -> bool:
        return any(globs.match(g, rel) for g in self.untrusted)

    def relative(self, path: Path) -> str:
        """Project-relative; a path outside the project (an offered skill's) stays absolute."""
        real, root = str(path), str(self.root)
        if real == root:
            return "."
        if real.startswith(_prefix(root)):  # what _resolve returns: no relpath needed
            return real[len(_prefix(root)) :]
        return real

    def skill_dir(self, real: Path) -> str | None:
        """The offered skill directory that holds `real`, if one does."""
        return next((d for d in self.skill_dirs if _is_under(str(real), d)), None)

    def _resolve(self, path: str, doing: str, also: tuple[str, ...] = ()) -> Path:
        if not path or "\0" in path:
            raise ToolError(f"invalid path {path!r}: give a path relative to the project root")
        root = str(self.root)
        try:
            real = _realpath(root, path)
        except OSError:  # realpath's readlink found no symlink where its lstat had seen one
            raise ToolError(
                f"refused {doing} {path}: it changed while it was being resolved (a symlink "
                "or a rename raced the check); nothing was done"
            ) from None
        kernel = None
        if real.startswith(_KERNEL_PREFIXES) or real in KERNEL_FILESYSTEMS:
            kernel = next(top for top in KERNEL_FILESYSTEMS if _is_under(real, top))
        if kernel is not None and not _is_under(root, kernel):  # even with the root at /
            raise ToolError(
                f"refused {doing} {path}: it resolves to {real}, in {kernel}, which tools "
                "never read or write (the kernel's and processes' own files); "
                "use paths inside the project"
            )
        if real == root or real.startswith(_prefix(root)):  # realpath's are normalised
            return Path(real)
        if not any(_is_under(real, d) for d in also):
            raise ToolError(
                f"refused {doing} {path}: it resolves to {real}, outside the project root "
                f"{self.root}; use paths inside the project"
            )
        return Path(real)


def _prefix(root: str) -> str:
    return root if root.endswith("/") else root + "/"


def _realpath(root: str, path: str) -> str:
    """os.path.realpath(root/path) for a root that is already real, without the lstat of
    each of the root's own parents: only the components of `path` are looked at. A path with
    `..`, an absolute one, or one that passes through a symlink is left to realpath."""
    parts = [p for p in path.split("/") if p and p != "."]
    if path.startswith("/") or ".." in parts:
        return os.path.realpath(os.path.join(root, path))
    real = root
    for n, part in enumerate(parts):
        real = f"{real}/{part}" if real != "/" else f"/{part}"
        try:
            mode = os.lstat(real).st_mode
        except OSError:  # missing, or not a directory: the rest cannot be a symlink
            return "/".join((real, *parts[n + 1 :]))
        if stat.S_ISLNK(mode):
            return os.path.realpath(os.path.join(root, path))
    return real


def shown_path(path: Path, root: Path) -> str:
    """A path as a person reads it in a message: project-relative, else `~/…`, else as is."""
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    home = Path.home()
    return f"~/{path.relative_to(home).as_posix()}" if path.is_relative_to(home) else str(path)


@functools.lru_cache(maxsize=64)
def _real(root: Path) -> Path:
    """The project root, resolved once (a Policy is made per job)."""
    return Path(os.path.realpath(root))


@functools.lru_cache(maxsize=4096)
def _clean(rel: str) -> str:
    """A declared project-relative path in the form `relative()` produces."""
    return PurePosixPath(rel.strip("/")).as_posix()


def _is_under(rel: str, top: str) -> bool:
    return rel == top or rel.startswith(top + "/")


def checked_output(policy: Policy, rel: str) -> Path:
    """Where a declared output really is, refused as a write there would be (TaskFailed):
    resolving outside the project (a symlink that bash made to a host file), into a folder
    tools never write, or to a file the task may not write. Nothing is read or hashed there."""
    try:
        return policy.resolve_write(rel)
    except ToolError as e:
        raise TaskFailed(f"output {rel}: {e}") from e

"""The project as a sandboxed command sees it: read-only but for the task's write directories,
and in those, the protected paths (what decides what a run does) unchangeable, whether they
exist or not.

Every source is bound from a descriptor opened without following a symlink at any step, so
a directory swapped for a symlink meanwhile (by another job's command) is never mounted.

In a write directory W, a protected path P that exists is bound read-only (a mount point
cannot be renamed or removed either), and each directory between W and P is bound onto itself
("pinned"): a mount point too, so that `mv W/a W/b` cannot carry P away and leave room for a
new `a/P`. A protected path that does not exist cannot be mounted over (bwrap would make it
on the host), so its deepest existing ancestor A is "sealed": bound read-only, and each of
A's existing files and folders (never a symlink) bound again writable. In A's folders and
A's files everything may still change; directly in A, no entry can be made, removed or
renamed. A protected path reached through a symlink is protected where it resolves to as
well, and the symlink cannot change (the folder that holds it is sealed). `.claw/` is hidden:
runner state is not for tools; git's config files are shown without their credentials.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

from claw_batch.errors import ToolError
from claw_batch.safety.paths import STATE_DIR
from claw_batch.sandbox import host

# Git's config files, and the folders of .git that hold none (walked past, not into).
_GIT_CONFIGS = frozenset({"config", "config.worktree"})
_GIT_DATA = frozenset({"objects", "refs", "logs", "hooks", "info", "lfs", "rr-cache"})
MAX_MOUNTS = 128  # each holds a descriptor until bwrap starts, and costs bwrap more than the last
_RANK = {"rw": 0, "seal": 1, "ro": 2, "hide": 2}  # what wins when a path is planned twice


@dataclass
class _Mount:
    op: str  # rw, ro, seal (ro, its entries rw again), hide (an empty read-only tmpfs)
    fd: int | None


class Plan:
    """The mounts of one project, planned from descriptors kept in `fds`."""

    def __init__(self, root: str, fds: contextlib.ExitStack, owner: tuple[int, int] | None):
        self.root = root
        self.fds = fds
        self.owner = owner  # made write directories get this owner (uid, gid)
        self.root_fd = self._keep(os.open(root, os.O_PATH | os.O_DIRECTORY))
        self.planned: dict[str, _Mount] = {}

    def arguments(
        self, writable: tuple[str, ...], protected: tuple[str, ...]
    ) -> tuple[list[str], list[int]]:
        """bwrap's mount arguments for the project, and the descriptors they name."""
        # Never a path out of the project: claw names these, but a mount follows no check.
        protected = _with_targets(self.root, tuple(p for p in protected if _inside(p)))
        mounted = []
        for rel in sorted(set(writable), key=_depth):
            if _under_any(rel, protected):
                continue  # a protected path stays read-only, whatever the write globs say
            fd = self._open_dir(rel)
            if fd is not None:
                self._add(rel, "rw", fd)
                mounted.append(rel)
        for rel in sorted(protected, key=_depth):
            write_dir = next((w for w in reversed(mounted) if _under(rel, w)), None)
            if write_dir is not None or rel == STATE_DIR:
                self._protect(rel, write_dir, protected)
        if len(self.planned) > MAX_MOUNTS:
            raise ToolError(
                f"the sandbox would need {len(self.planned)} mounts (at most {MAX_MOUNTS}) to "
                "keep the protected paths from being made in the write directories; give "
                "this task narrower permissions.write, or fewer entries in those folders"
            )
        return self._emit()

    def filesystems(self) -> tuple[str, ...]:
        """A path on each filesystem the command may write (see `ceilings`)."""
        found: dict[int, str] = {}
        for rel, mount in self.planned.items():
            if mount.op == "rw" and mount.fd is not None:
                found.setdefault(os.fstat(mount.fd).st_dev, _join(self.root, rel))
        return tuple(found.values())

    def _protect(self, rel: str, write_dir: str | None, protected: tuple[str, ...]) -> None:
        if any(m.op in ("ro", "hide") and _under(rel, p) for p, m in self.planned.items()):
            return  # inside a protected folder already read-only
        way, target = self._reach(rel)
        if target is not None:
            hide = rel == STATE_DIR and stat.S_ISDIR(os.fstat(target).st_mode)
            self._add(rel, "hide" if hide else "ro", target)
        elif write_dir is not None:
            deepest, fd = way[-1]
            if not _under(deepest, write_dir):
                raise ToolError(
                    f"the project changed while the sandbox was being prepared ({rel}); "
                    "nothing was run: try again"
                )
            self._seal(deepest, fd, protected)
        if write_dir is not None:  # pin each folder between the write directory and it
            for step, fd in way:
                if step != write_dir and _under(step, write_dir):
                    self._add(step, "rw", fd)

    def _seal(self, rel: str, fd: int, protected: tuple[str, ...]) -> None:
        self._add(rel, "seal", fd)
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        try:
            names = os.listdir(listing)
        finally:
            os.close(listing)
        for name in sorted(names):
            child = _join(rel, name)
            if child in protected:
                continue  # read-only if it exists (see _protect), and it cannot be made
            entry = self._open(name, fd)
            if entry is not None and _bindable(entry):
                self._add(child, "rw", entry)

    def _reach(self, rel: str) -> tuple[list[tuple[str, int]], int | None]:
        """The folders on the way to `rel` that exist, reached without a symlink (the root
        first), and a descriptor of `rel` itself when it exists and can be bound."""
        way = [("", self.root_fd)]
        parts = PurePosixPath(rel).parts
        for n, part in enumerate(parts):
            fd = self._open(part, way[-1][1])
            if fd is None:
                return way, None
            if n == len(parts) - 1:
                return way, fd if _bindable(fd) else None
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                return way, None
            way.append((_join(way[-1][0], part), fd))
        return way, None

    def _open_dir(self, rel: str) -> int | None:
        """A descriptor of the write directory `rel`, each missing folder made (and given the
        project's owner), reached without following a symlink; None when a step is a
        symlink or not a folder."""
        parts = PurePosixPath(rel).parts if rel else ()
        if ".." in parts:
            return None
        fd = self._keep(os.dup(self.root_fd))  # bwrap closes each descriptor once it has bound it
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
                if self.owner is not None:
                    os.chown(part, *self.owner, dir_fd=fd, follow_symlinks=False)
            opened = self._open(part, fd)
            if opened is None or not stat.S_ISDIR(os.fstat(opened).st_mode):
                return None
            fd = opened
        return fd

    def _open(self, name: str, dir_fd: int) -> int | None:
        """`name` in the folder `dir_fd`, the entry itself even if it is a symlink (O_PATH |
        O_NOFOLLOW opens the link); None when it is missing or a symlink."""
        try:
            fd = self._keep(os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd))
        except OSError:
            return None
        return None if stat.S_ISLNK(os.fstat(fd).st_mode) else fd

    def _add(self, rel: str, op: str, fd: int) -> None:
        known = self.planned.get(rel)
        if known is None or _RANK[op] > _RANK[known.op]:
            self.planned[rel] = _Mount(op, fd)

    def _emit(self) -> tuple[list[str], list[int]]:
        args = [*host.parents(self.root), "--ro-bind-fd", str(self.root_fd), self.root]
        kept = [self.root_fd]
        for rel in sorted(self.planned, key=lambda r: (_depth(r), r)):
            mount, path = self.planned[rel], _join(self.root, rel)
            if mount.op == "hide":
                args += ["--tmpfs", path, "--remount-ro", path]
                continue
            if mount.op == "seal" and not rel:
                continue  # the root is read-only already
            assert mount.fd is not None
            args += ["--bind-fd" if mount.op == "rw" else "--ro-bind-fd", str(mount.fd), path]
            kept.append(mount.fd)
        config, fds = self._git_configs()
        return [*args, *config], [*kept, *fds]

    def _git_configs(self) -> tuple[list[str], list[int]]:
        """Each git config file of the project's repository (`.git/config`, a submodule's,
        a worktree's) that holds credentials — the `AUTHORIZATION` header actions/checkout
        leaves there, a URL's password — shown without them, bound over it: git in the
        sandbox has no use for them, and a command could hand them to the model in a form
        redaction would not know (decoded, reversed)."""
        git = _join(self.root, ".git")
        if os.path.islink(git) or not os.path.isdir(git):
            return [], []
        args: list[str] = []
        kept: list[int] = []
        for top, dirs, files in os.walk(git):  # symlinks are not followed
            dirs[:] = [d for d in dirs if d not in _GIT_DATA]
            for name in sorted(set(files) & _GIT_CONFIGS):
                path = os.path.join(top, name)
                data = self._cleaned(path)
                if data is not None:
                    args += ["--perms", "0644", "--ro-bind-data", str(data), path]
                    kept.append(data)
        return args, kept

    def _cleaned(self, path: str) -> int | None:
        """A descriptor of `path`'s text with its credentials redacted; None when it holds
        none (or is not a regular file)."""
        from claw_batch.safety.redact import Redactor

        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None
            text = file.read(1 << 20).decode("utf-8", errors="replace")
        clean = Redactor()(text)
        if clean == text:
            return None
        data = self._keep(os.memfd_create("claw-git-config", os.MFD_CLOEXEC))
        os.write(data, clean.encode())
        os.lseek(data, 0, os.SEEK_SET)
        return data

    def _keep(self, fd: int) -> int:
        self.fds.callback(os.close, fd)
        return fd


def _with_targets(root: str, protected: tuple[str, ...]) -> tuple[str, ...]:
    """The protected paths, and where those reached through a symlink resolve to, when that
    is inside the project (claw reads them there)."""
    found = dict.fromkeys(PurePosixPath(p).as_posix() for p in protected)
    for rel in list(found):
        real = os.path.realpath(_join(root, rel))
        if real != _join(root, rel) and host.under(real, root) and real != root:
            found.setdefault(real[len(root) + 1 :] if root != "/" else real[1:])
    return tuple(found)


def _inside(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return bool(parts) and not rel.startswith("/") and ".." not in parts and "." not in parts


def _bindable(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISDIR(mode) or stat.S_ISREG(mode)


def _depth(rel: str) -> int:
    return rel.count("/") + bool(rel)


def _join(root: str, rel: str) -> str:
    if not rel:
        return root
    return f"{root.rstrip('/')}/{rel}" if root else rel


def _under(rel: str, top: str) -> bool:
    return top == "" or host.under(rel, top)


def _under_any(rel: str, tops: tuple[str, ...]) -> bool:
    return any(_under(rel, top) for top in tops)

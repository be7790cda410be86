"""What an untainted job's command did with the project's outside content
(claw_batch.taint.jobtaint).

bash's output is raw text, and the command may read anything the project holds. So around
each command of a job that has read no outside content, claw asks the kernel (inotify) what
the command did with the files that hold some — the ledger's tainted files whose content
still matches, every file in a watched folder (and the root files a watch glob matches),
and, while something is staged, the git index and the staged blobs:

- it *read* outside content when it opened one of those files, or listed a watched folder
  or the folder of one of them (dropped names, and the names a tainted job gave its files,
  are outside content too): its output reaches the model fenced, and the job is tainted,
  so what the call wrote is tainted as well;
- it *moved* some when it renamed or linked such a file, or a folder holding one, without
  opening it: the new names are found by inode and tainted (a copy needs an open, so no
  content hash is needed to follow one);
- it *changed* one in place without opening it (truncate): what is left of it stays tainted.

inotify watches an inode, not a path: an open through a bind mount, an id-mapped mount or
another name of the file is seen all the same. A file the command could rename or link (in
one of its write directories, or with a second name already) is watched itself; elsewhere
its folder is watched, which reports the name of each file opened in it. The kernel does not
say who opened a file: an open by another process during the call counts too (the safe way
to be wrong).

Watching changes nothing the command sees. Hiding the outside content from it instead
(a placeholder mounted over each such file) would hand an honest archiving task the
placeholder to copy, leave the files unmovable (a mount point), and spend a mount per file
of the sandbox's 128.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import struct
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from claw_batch.safety.untrusted import printable
from claw_batch.taint.outside import NEVER_WALKED

if TYPE_CHECKING:
    import ctypes

    from claw_batch.taint.outside import Outside

IN_MODIFY, IN_ATTRIB, IN_OPEN = 0x2, 0x4, 0x20
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_MOVE_SELF = 0x40, 0x80, 0x100, 0x800
IN_Q_OVERFLOW = 0x4000
IN_ONLYDIR, IN_DONT_FOLLOW = 0x01000000, 0x02000000
FILE_MASK = IN_OPEN | IN_ATTRIB | IN_MODIFY | IN_MOVE_SELF | IN_DONT_FOLLOW
DIR_MASK = IN_OPEN | IN_MOVED_FROM | IN_MOVE_SELF | IN_ONLYDIR  # through a symlink too
WATCHED_DIR_MASK = DIR_MASK | IN_CREATE | IN_MOVED_TO  # a watched folder: drops arriving
MAX_WATCHES = 8192  # inotify's per-user default on older kernels, and ~25 ms to set up
_EVENT = struct.Struct("iIII")


class Unwatchable(Exception):
    """No watch can be set here; the text says why."""


@dataclass
class Seen:
    """What a command did with the outside content."""

    read: set[str] = field(default_factory=set)  # what it read, as each is shown
    moved: bool = False  # outside content may have a new name: look for it by inode
    changed: set[str] = field(default_factory=set)  # outside files changed without an open


class Watch:
    """The inotify watches of one call: `start` before the command, `stop` after it."""

    def __init__(self, root: str, outside: Outside) -> None:
        self.root = root
        self.outside = outside
        self.fd: int | None = None
        self.names: dict[int, list[tuple[str, bool]]] = {}  # wd -> (path, is a folder)
        self.seen: Seen | None = None  # once the command ran
        self.blind = False  # it ran without watches (granted): as if it read everything

    def start(self) -> None:
        """Raises Unwatchable when the watches cannot all be set."""
        out = self.outside
        wanted = len(out.movable) + len(out.dirs)
        if wanted > MAX_WATCHES:
            raise Unwatchable(
                f"it would take {wanted} watches, more than {MAX_WATCHES}; each outside file "
                "in the task's write directories takes one"
            )
        libc = _libc()
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise Unwatchable(_why(_errno()))
        self.fd = fd
        for rel in sorted(out.movable):
            self._add(libc, rel, FILE_MASK, folder=False)
        for rel in sorted(out.dirs):
            mask = WATCHED_DIR_MASK if rel in out.watched else DIR_MASK
            self._add(libc, rel, mask, folder=True)

    def _add(self, libc: ctypes.CDLL, rel: str, mask: int, *, folder: bool) -> None:
        path = os.path.join(self.root, rel) if rel else self.root
        wd = libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            code = _errno()
            if code in (errno.ENOENT, errno.ENOTDIR):
                return  # gone meanwhile: nothing of it to read
            self.stop()
            raise Unwatchable(_why(code))
        self.names.setdefault(wd, []).append((rel, folder))

    def stop(self) -> Seen:
        """What the command did (the events queued since `start`); the watches end."""
        seen, fd, self.fd = Seen(), self.fd, None
        if fd is None:
            return seen
        try:
            events = _events(fd)
        finally:
            # Closing an inotify instance waits for the kernel's grace period (~8 ms): not
            # on the call's way.
            threading.Thread(target=os.close, args=(fd,), name="inotify-close").start()
        arrived = any(mask & (IN_CREATE | IN_MOVED_TO) for _, mask, _ in events)
        for wd, mask, name in events:
            if mask & IN_Q_OVERFLOW:  # events were lost: count everything as read
                seen.read.update(self.outside.shown())
                continue
            for rel, folder in self.names.get(wd, ()):
                if folder:
                    self._in_folder(seen, rel, mask, name, arrived)
                else:
                    self._on_file(seen, rel, mask)
        return seen

    def _on_file(self, seen: Seen, rel: str, mask: int) -> None:
        if mask & IN_OPEN:
            seen.read.add(self.outside.files[rel])
        if mask & (IN_ATTRIB | IN_MOVE_SELF):
            seen.moved = True  # a new name (a link, a rename), or only a touch
        if mask & IN_MODIFY:
            seen.changed.add(rel)

    def _in_folder(self, seen: Seen, rel: str, mask: int, name: str, arrived: bool) -> None:
        out = self.outside
        child = f"{rel}/{name}" if rel and name else name or rel
        watched = rel in out.watched
        if mask & IN_MOVE_SELF or (mask & IN_MOVED_FROM and (watched or child in out.files)):
            seen.moved = True
        if not mask & IN_OPEN:
            return
        if not name:  # the folder itself was opened: listed
            if (watched and (out.held or arrived)) or rel in out.listed:
                seen.read.add(printable(rel or "."))
        elif watched or child in out.files:
            seen.read.add(out.files.get(child) or printable(child))


def _events(fd: int) -> list[tuple[int, int, str]]:
    found: list[tuple[int, int, str]] = []
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return found
        offset = 0
        while offset < len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
            start = offset + _EVENT.size
            name = data[start : start + size].rstrip(b"\0")
            found.append((wd, mask, os.fsdecode(name)))
            offset = start + size


def _why(code: int) -> str:
    limit = {errno.ENOSPC: "max_user_watches", errno.EMFILE: "max_user_instances"}.get(code)
    said = f"inotify: {os.strerror(code)}"
    return f"{said}; raise fs.inotify.{limit}" if limit else said


@functools.cache
def _libc() -> ctypes.CDLL:
    import ctypes  # only where a command is watched

    libc = ctypes.CDLL(None, use_errno=True)
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


Key = tuple[int, int, int, int, int]  # mtime, size, inode, device, ctime (`walk`)


def walk(root: str, dirs: tuple[str, ...]) -> dict[str, Key]:
    """Every regular file under the directories ("" is the root; symlinks not followed):
    its stat key (mtime, size, inode, device, ctime). The ctime because a command can set
    the others back after changing a file (same size, utimensat), not the ctime."""
    found: dict[str, Key] = {}
    for top in dirs:
        base = os.path.join(root, top) if top else root
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames if d not in NEVER_WALKED]
            for name in filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                    found[rel] = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev, st.st_ctime_ns)
    return found

"""When a dropped file is complete: no write events for the settle time and the same size and
mtime at its end as at its start. A copy in progress, a download that grows, an editor saving
in several writes: none of them is handed over half-written. Names that tools use for files
being written (`*.part`, `*.tmp`, `~*`, `.*`) are never handed over at all: their rename to
the final name is the event that counts."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable
from dataclasses import dataclass

IGNORED = ("*.part", "*.tmp", "~*", ".*")

StatKey = tuple[int, int, int]  # size, mtime_ns, inode


def ignored(rel: str) -> bool:
    """A temporary name, or a file inside a hidden directory."""
    parts = rel.split("/")
    name = parts[-1]
    hidden_dir = any(part.startswith(".") for part in parts[:-1])
    return hidden_dir or any(fnmatch.fnmatchcase(name, pattern) for pattern in IGNORED)


def stat_key(path: str) -> StatKey | None:
    """The file's size, mtime and inode; None when it is not (or no longer) a regular file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if (st.st_mode & 0o170000) != 0o100000:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


@dataclass
class _Seen:
    key: StatKey | None  # when the last event was seen
    since: float  # the time of the last event (or change of key)


class Settling:
    """Files that changed and are not yet settled. Times are the caller's clock (seconds)."""

    def __init__(self, settle: float, stat: Callable[[str], StatKey | None]) -> None:
        self.settle = settle
        self.stat = stat
        self.files: dict[str, _Seen] = {}

    def __contains__(self, rel: str) -> bool:
        return rel in self.files

    def __len__(self) -> int:
        return len(self.files)

    def touch(self, rel: str, at: float) -> None:
        """A write, create or rename event for `rel` at `at`: its settle time starts again."""
        self.files[rel] = _Seen(self.stat(rel), at)

    def forget(self, rel: str) -> None:
        self.files.pop(rel, None)

    def ready(self, now: float) -> list[str]:
        """The files that have settled by `now`, in the order they were first seen; they are
        no longer tracked. A file whose size or mtime changed without an event starts its
        settle time again; a file that is gone is dropped."""
        done = []
        for rel, seen in list(self.files.items()):
            if now - seen.since < self.settle:
                continue
            key = self.stat(rel)
            if key is None:
                del self.files[rel]
            elif key != seen.key:
                self.files[rel] = _Seen(key, now)
            else:
                del self.files[rel]
                done.append(rel)
        return done

    def next_due(self) -> float | None:
        """When the earliest tracked file may be settled."""
        return min((s.since + self.settle for s in self.files.values()), default=None)

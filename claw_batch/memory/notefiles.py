"""The files memory search reads: MEMORY.md, the daily notes (memory/*.md) and the archive
(memory/archive/*.md), freshest first, each with the day its freshness counts from.

A daily note counts from the date in its name, an archive file from its month's last day, a
note without a date in its name as UNDATED_AGE_DAYS old, MEMORY.md as always current.
Freshness halves every HALF_LIFE_DAYS of age. Listing costs a directory scan and a sort of
names: nothing is computed per file that is not searched or has no hit.
"""

from __future__ import annotations

import calendar
import datetime as dt
import os
import re
import stat
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

from claw_batch.memory import memoryfile

HALF_LIFE_DAYS = 14.0
UNDATED_AGE_DAYS = 28  # a topic note (people.md) counts as four weeks old: freshness 1/4
TIMELESS = "9999-12-31"  # MEMORY.md's day: it is always current

_DAY = re.compile(r"^(\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01]))\.md$")
_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])\.md$")

MEMORY, NOTE, ARCHIVE = 0, 1, 2  # kinds of file


class NoteFile(NamedTuple):
    day: str  # ISO date its freshness counts from
    kind: int  # MEMORY, NOTE or ARCHIVE
    shown: str  # project-relative
    real: str  # the path searched: symlinks resolved, inside the project

    @property
    def curated(self) -> bool:
        """MEMORY.md and the archive hold facts; daily notes hold a log."""
        return self.kind != NOTE


def list_files(root: Path, workspace: str, today: dt.date) -> list[NoteFile]:
    """The regular files inside the project among them, freshest first."""
    top = os.path.realpath(root)
    files: list[NoteFile] = []
    shown = f"{workspace}/{memoryfile.MEMORY_FILE}"
    real = confined(top, shown)
    if real is not None and _is_file(real):
        files.append(NoteFile(TIMELESS, MEMORY, shown, real))
    undated = (today - dt.timedelta(days=UNDATED_AGE_DAYS)).isoformat()
    for rel, kind in ((memoryfile.NOTES_DIR, NOTE), (memoryfile.ARCHIVE_DIR, ARCHIVE)):
        shown_dir = f"{workspace}/{rel}/"
        day_of = _day_of if kind == NOTE else _month_end
        files += [
            NoteFile(day_of(name) or undated, kind, shown_dir + name, real)
            for real, name in _markdown_files(top, shown_dir)
        ]
    unique = list({f.real: f for f in reversed(files)}.values())  # a file linked twice: once
    # Newest day first; the order within a day does not change what a search finds.
    unique.sort(key=itemgetter(0), reverse=True)
    return unique


def freshness(day: str, today: dt.date) -> float:
    age = (today - _date(day)).days
    return 1.0 if age <= 0 else 0.5 ** (age / HALF_LIFE_DAYS)


def confined(top: str, rel: str) -> str | None:
    """The real path of `rel` (symlinks resolved), or None when that is outside `top`."""
    real = os.path.realpath(os.path.join(top, rel))
    return real if real == top or real.startswith(top.rstrip("/") + "/") else None


def _markdown_files(top: str, shown_dir: str) -> list[tuple[str, str]]:
    """(real path, name) of the directory's *.md files that are regular files inside the
    project: a file in a directory inside the project is inside it (no realpath needed); a
    symlink is followed to a regular file inside it only; anything else (a FIFO would block
    ripgrep) is skipped."""
    directory = confined(top, shown_dir)
    if directory is None or not os.path.isdir(directory):
        return []
    try:
        with os.scandir(directory) as it:
            entries = [e for e in it if (n := e.name).endswith(".md") and n[0] != "."]
    except OSError:
        return []
    found = [(e.path, e.name) for e in entries if e.is_file(follow_symlinks=False)]
    for entry in entries:
        if entry.is_symlink():
            real = confined(top, os.path.relpath(entry.path, top))
            if real is not None and _is_file(real):
                found.append((real, entry.name))
    return found


def _day_of(name: str) -> str | None:
    m = _DAY.match(name)
    return m.group(1) if m else None


def _month_end(name: str) -> str | None:
    m = _MONTH.match(name)
    if m is None:
        return None
    year, month = int(m.group(1)), int(m.group(2))
    return f"{year:04d}-{month:02d}-{calendar.monthrange(year, month)[1]:02d}"


def _date(day: str) -> dt.date:
    try:
        return dt.date.fromisoformat(day)
    except ValueError:  # 2026-02-30.md: the last day of its month, where it sorts
        year, month = int(day[:4]), int(day[5:7])
    if year < dt.MINYEAR:  # 0000-01-01.md
        return dt.date.min
    return dt.date(year, month, calendar.monthrange(year, month)[1])


def _is_file(real: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(real).st_mode)
    except OSError:
        return False

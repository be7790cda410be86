"""The file tools: read, write, edit, ls, find. Confinement is `Policy`'s job; `safeopen` opens
only what it approved. These check what a path is (regular file, directory, something else)
and keep every answer, and every file they write, bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated

import python_ripgrep
from pydantic import Field

from claw_batch import globs
from claw_batch.errors import ToolError
from claw_batch.safety.paths import NEVER_SEARCHED, Policy
from claw_batch.safety.safeopen import (
    OutOfFds,
    kind,
    open_checked,
    open_dir,
    opened,
    read_bytes,
    write_file,
)
from claw_batch.taint.jobtaint import holds_marked
from claw_batch.tools.base import ToolContext

MAX_LINES = 2000
MAX_BYTES = 50_000
MAX_FILE_BYTES = 50 * 1024 * 1024  # what read loads, and what write and edit may leave
BINARY_SNIFF = 8192
MAX_ENTRIES = 500
MAX_FOUND = 1000

# Paths are relative to the project root: the system prompt says so once, for every tool.
FilePath = str
Dir = str


def read(
    ctx: ToolContext,
    *,
    path: FilePath,
    offset: Annotated[int | None, Field(ge=1, description="first line, 1-based")] = None,
    limit: Annotated[int | None, Field(ge=1)] = None,
) -> str:
    """Read a text file, ≤ 2000 lines / 50 KB a call; a footer says how to go on."""
    pol = policy(ctx)
    real = pol.resolve_read(path)
    shown = pol.relative(real)
    lines = load_text(real, shown, "replace").split("\n")
    if lines[-1] == "":  # the newline that ends the last line does not start another one
        lines.pop()
    if real.name == "SKILL.md" and pol.skill_dir(real) is not None:
        # Agent Skills write {baseDir} for their own directory, as the model should name it
        base = pol.relative(real.parent)
        lines = [line.replace("{baseDir}", base) for line in lines]
    text = _window(lines, offset or 1, min(limit or MAX_LINES, MAX_LINES))
    # A memory file is outside content where it quotes a tainted job (only what is shown).
    if ctx.taint.outside(pol, shown) or holds_marked(ctx.workspace, shown, text.split("\n")):
        return ctx.taint.fenced(text, shown)
    return text


def write(
    ctx: ToolContext,
    *,
    path: FilePath,
    content: str,
) -> str:
    """Create or replace a file atomically (parent folders are made)."""
    pol = policy(ctx)
    real = pol.resolve_write(path)
    shown = pol.relative(real)
    data = content.encode("utf-8")
    _save(ctx, real, shown, data)
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return f"wrote {lines} line{'' if lines == 1 else 's'} ({len(data)} bytes) to {shown}"


def edit(
    ctx: ToolContext,
    *,
    path: FilePath,
    old_string: str,
    new_string: str,
    replace_all: bool = False,
) -> str:
    """Replace old_string (exact; once, unless replace_all) with new_string."""
    pol = policy(ctx)
    real = pol.resolve_write(path)
    shown = pol.relative(real)
    if not old_string:
        raise ToolError("old_string is empty; use write to create or replace a whole file")
    if old_string == new_string:
        raise ToolError("old_string and new_string are identical; there is nothing to change")
    text = load_text(real, shown, "surrogateescape")  # round-trips bytes that are not UTF-8
    lines = _occurrences(text, old_string)
    if not lines:
        raise ToolError(_not_found(text, old_string, shown))
    where = ", ".join(map(str, lines[:20])) + (", ..." if len(lines) > 20 else "")
    if len(lines) > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {len(lines)} times in {shown} (lines {where}); "
            "add context to make it unique or set replace_all"
        )
    text = text.replace(old_string, new_string)
    # What stays of a file that was outside content still is: an edit does not launder it.
    kept = shown if ctx.taint.outside(pol, shown) else None
    _save(ctx, real, shown, text.encode("utf-8", "surrogateescape"), kept)
    times = "1 occurrence" if len(lines) == 1 else f"{len(lines)} occurrences"
    return f"replaced {times} in {shown} (line{'s' if len(lines) > 1 else ''} {where})"


def ls(ctx: ToolContext, *, path: Dir = ".") -> str:
    """List a folder; folders end in /."""
    pol = policy(ctx)
    real = pol.resolve_read(path)
    shown = pol.relative(real)
    with opened(real, shown) as (fd, st):
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{shown} is a file, not a directory; use read to see its content")
        names = _names(fd, shown)
    if not names:
        return f"{shown} is empty"
    more = len(names) - MAX_ENTRIES
    note = [f"[... {more} more entries not shown]"] if more > 0 else []
    listing = "\n".join(names[:MAX_ENTRIES] + note)
    # Names of files from outside the project are outside content too.
    inside = [f"{shown}/{n}" if shown != "." else n for n in names]
    if ctx.taint.any_outside(pol, inside):
        return ctx.taint.fenced(listing, shown)
    return listing


def find(
    ctx: ToolContext,
    *,
    pattern: Annotated[str, Field(description="e.g. *.py or src/**/test_*.py")],
    path: Dir = ".",
) -> str:
    """Find files by glob (`**` spans folders), skipping hidden and git-ignored ones."""
    pol = policy(ctx)
    real = pol.resolve_read(path)
    base = pol.relative(real)
    with opened(real, base) as (_, st):
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{base} is a file, not a directory; find searches directories")
    listed = python_ripgrep.files([], paths=[str(real)])
    wanted = [f for f in listed if globs.match_file(pattern, pol.relative(Path(f)), base)]
    found = []
    for name in wanted:
        fd = checked_file(pol, name)
        if fd is not None:
            os.close(fd)
            found.append(pol.relative(Path(name)))
    found.sort()
    if not found:
        return f"no files match {pattern} in {base}"
    more = len(found) - MAX_FOUND
    note = [f"[... {more} more files not shown; narrow the pattern or path]"] if more > 0 else []
    listing = "\n".join(found[:MAX_FOUND] + note)
    if ctx.taint.any_outside(pol, found):
        return ctx.taint.fenced(listing, base)
    return listing


def policy(ctx: ToolContext) -> Policy:
    pol: Policy = ctx.policy
    return pol


def checked_file(pol: Policy, name: str) -> int | None:
    """An O_PATH fd (the caller closes it) of the file ripgrep listed as `name`, if that is a
    regular file where it was listed. ripgrep walks by path, so a folder swapped for a symlink
    while it walked can list files from elsewhere: those are left out, as are runner state and
    what changed, or is not a regular file, since. OutOfFds when no fd is left."""
    rel = pol.relative(Path(name))
    if is_never_listed(rel):
        return None
    try:
        fd, st = open_checked(Path(name), rel)
    except OutOfFds:
        raise
    except ToolError:
        return None
    if stat.S_ISREG(st.st_mode):
        return fd
    os.close(fd)
    return None


def is_never_listed(rel: str) -> bool:
    top = rel.split("/", 1)[0]
    return top in NEVER_SEARCHED


def stat_path(real: Path, shown: str) -> os.stat_result:
    try:
        return os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"no such file or directory: {shown}") from None
    except OSError as e:
        raise ToolError(f"cannot access {shown}: {e.strerror}") from None


def require_file(real: Path, shown: str, dir_hint: str) -> os.stat_result:
    return _regular(stat_path(real, shown), shown, dir_hint)


def load_text(real: Path, shown: str, errors: str) -> str:
    with opened(real, shown) as (fd, st):
        _regular(st, shown, "use ls to list it")
        if st.st_size <= MAX_FILE_BYTES:
            data = read_bytes(fd, st.st_size, MAX_FILE_BYTES)
    if st.st_size > MAX_FILE_BYTES or len(data) > MAX_FILE_BYTES:
        size = f"{st.st_size} bytes" if st.st_size > MAX_FILE_BYTES else "it grew while read"
        raise ToolError(
            f"{shown} is too large ({size}, limit {MAX_FILE_BYTES}); "
            "use grep to find the lines you need"
        )
    if b"\0" in data[:BINARY_SNIFF]:
        raise ToolError(f"{shown} looks like a binary file (it contains NUL bytes); not read")
    return data.decode("utf-8", errors)


def _regular(st: os.stat_result, shown: str, dir_hint: str) -> os.stat_result:
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory; {dir_hint}")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown} is not a regular file ({kind(st.st_mode)}); refused")
    return st


def _window(lines: list[str], offset: int, limit: int) -> str:
    total = len(lines)
    if total == 0 and offset == 1:
        return "(empty file)"
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of the file ({total} lines)")
    shown: list[str] = []
    size = 0
    for line in lines[offset - 1 : offset - 1 + limit]:
        size += len(line.encode("utf-8")) + 1
        if size > MAX_BYTES:
            if not shown:  # a single huge line: show its start rather than nothing
                head = line.encode("utf-8")[:MAX_BYTES].decode("utf-8", "ignore")
                shown.append(
                    f"{head}\n[line {offset} is longer than 50 KB; only its start is shown]"
                )
            break
        shown.append(line)
    end = offset - 1 + len(shown)
    body = "\n".join(shown)
    if end < total:
        body += (
            f"\n\n[lines {offset}-{end} of {total} shown; call read with offset={end + 1} "
            "to continue]"
        )
    return body


def _occurrences(text: str, needle: str) -> list[int]:
    """1-based line numbers where non-overlapping occurrences of `needle` start."""
    lines: list[int] = []
    line, counted, pos = 1, 0, text.find(needle)
    while pos >= 0:
        line += text.count("\n", counted, pos)
        lines.append(line)
        counted = pos
        pos = text.find(needle, pos + len(needle))
    return lines


def _not_found(text: str, old: str, shown: str) -> str:
    if " ".join(old.split()) in " ".join(text.split()):
        return (
            f"old_string not found in {shown}, but it matches if whitespace is ignored; "
            "copy the exact indentation and line breaks from read"
        )
    return f"old_string not found in {shown}; read the file and copy the exact text to replace"


def _save(ctx: ToolContext, real: Path, shown: str, data: bytes, kept: str | None = None) -> None:
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(
            f"refused: the new content of {shown} is {len(data)} bytes, over the limit of "
            f"{MAX_FILE_BYTES} for a file the tools write; nothing was written"
        )
    try:
        with ctx.taint.writing(shown, data, kept):  # tainted content: recorded before it lands
            write_file(policy(ctx).root, real, shown, data)
    except OSError as e:
        raise ToolError(f"cannot write {shown}: {e.strerror or e}") from None


def _names(fd: int, shown: str) -> list[str]:
    try:
        listing = open_dir(fd)
    except OSError as e:
        raise ToolError(f"cannot list {shown}: {e.strerror}") from None
    try:
        with os.scandir(listing) as it:
            return sorted(e.name + "/" if _is_dir(e) else e.name for e in it)
    except OSError as e:
        raise ToolError(f"cannot list {shown}: {e.strerror}") from None
    finally:
        os.close(listing)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False

"""grep: ripgrep (in-process, via python-ripgrep) with project-relative, sorted, capped output."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Annotated

import python_ripgrep
from pydantic import Field

from claw_batch import globs
from claw_batch.errors import ToolError
from claw_batch.safety.paths import NEVER_SEARCHED, Policy
from claw_batch.safety.safeopen import OutOfFds, link, opened
from claw_batch.taint.jobtaint import holds_marked
from claw_batch.tools.base import ToolContext
from claw_batch.tools.files import checked_file, policy

MAX_LINES = 200
MAX_BYTES = 50_000
MAX_LINE_CHARS = 1000
# ripgrep separates path, line number and text with these instead of ':' and '-', so that
# paths containing ':' or '-3-' parse unambiguously; the model sees ':' and '-'.
MATCH_SEP = "\x00"
CONTEXT_SEP = "\x01"
FD_LINK = re.compile(r"/proc/self/fd/\d+")  # the paths ripgrep is given (safeopen.link)
# Files searched at a time: each holds an fd while ripgrep reads it, and -j 32 jobs may grep
# at once under a soft limit of 1,024 fds.
BATCH = 32


def grep(
    ctx: ToolContext,
    *,
    pattern: Annotated[str, Field(description="Rust regex")],
    path: str = ".",
    glob: Annotated[str | None, Field(description="only files like this, e.g. *.py")] = None,
    ignore_case: bool = False,
    context: Annotated[int, Field(ge=0, le=10)] = 0,
) -> str:
    """Search file contents with ripgrep, skipping hidden, binary and git-ignored files."""
    pol = policy(ctx)
    real = pol.resolve_read(path)
    base = pol.relative(real)
    regex = ("(?i)" if ignore_case else "") + pattern
    with opened(real, base) as (fd, st):
        if stat.S_ISREG(st.st_mode):  # ripgrep reads the file that was checked, through its fd
            blocks = [(base, _lines(c, base)) for c in _search(regex, [link(fd)], context)]
        elif not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{base} is not a regular file or directory; refused")
    if stat.S_ISDIR(st.st_mode):
        blocks = _search_tree(regex, real, glob, context, pol)
    shown = [
        (rel, block)
        for rel, block in sorted(blocks)
        if block and (glob is None or globs.match_file(glob, rel, base))
    ]
    lines = [line for _, block in shown for line in block]
    if not lines:
        return "no matches"
    outside = sorted(
        {
            rel
            for rel, block in shown
            if ctx.taint.outside(pol, rel) or holds_marked(ctx.workspace, rel, _texts(rel, block))
        }
    )
    return ctx.taint.fenced(_capped(lines), ", ".join(outside)) if outside else _capped(lines)


def _texts(rel: str, block: list[str]) -> list[str]:
    """The text of a file's matched and context lines, without their `rel:N:` (`rel-N-`)."""
    texts = []
    for line in block:
        rest = line[len(rel) + 1 :]
        digits = len(rest) - len(rest.lstrip("0123456789"))
        if line != "--":
            texts.append(rest[digits + 1 :])
    return texts


def _search_tree(
    regex: str, real: Path, glob: str | None, context: int, pol: Policy
) -> list[tuple[str, list[str]]]:
    """ripgrep lists the files (its ignore rules, by path); each is opened and checked where
    it was listed, and ripgrep searches those fds, a batch at a time."""
    # A glob without '/' names files, which ripgrep filters on directly; a path glob is
    # matched in Python because ripgrep anchors it at the process's working directory.
    rg_globs = [glob] if glob and "/" not in glob else []
    try:
        listed = python_ripgrep.files(
            [], paths=[str(real)], globs=[*rg_globs, *(f"!{d}" for d in NEVER_SEARCHED)]
        )
    except ValueError as e:
        raise ToolError(f"invalid pattern or glob: {e}") from None
    blocks: list[tuple[str, list[str]]] = []
    at = 0
    while at < len(listed):
        batch, at = _batch(pol, listed, at)
        by_link = {link(fd): pol.relative(Path(name)) for name, fd in batch}
        try:
            chunks = _search(regex, list(by_link), context) if batch else []
        finally:
            for _, fd in batch:
                os.close(fd)
        single = len(by_link) == 1  # then ripgrep names no file
        for chunk in chunks:
            given = FD_LINK.match(chunk)
            where = next(iter(by_link)) if single else given[0] if given else ""
            if where in by_link:
                rel = by_link[where]
                blocks.append((rel, _lines(chunk, rel, 0 if single else len(where))))
    return blocks


def _batch(pol: Policy, listed: list[str], at: int) -> tuple[list[tuple[str, int]], int]:
    """Checked files from listed[at:], each with its fd (the caller closes them), and where
    the next batch starts: up to BATCH of them. When the process runs out of fds, half of
    what was opened is let go again (ripgrep needs fds to read the rest), and the next batch
    starts there."""
    batch: list[tuple[int, str, int]] = []  # (index in listed, name, fd)
    while at < len(listed) and len(batch) < BATCH:
        try:
            fd = checked_file(pol, listed[at])
        except OutOfFds:
            if len(batch) < 2:
                raise
            keep = len(batch) // 2
            for _, _, extra in batch[keep:]:
                os.close(extra)
            at, batch = batch[keep][0], batch[:keep]
            break
        if fd is not None:
            batch.append((at, listed[at], fd))
        at += 1
    return [(name, fd) for _, name, fd in batch], at


def _search(regex: str, paths: list[str], context: int) -> list[str]:
    """ripgrep's output: one string per file with matches, lines separated by newlines."""
    try:
        chunks: list[str] = python_ripgrep.search(
            [regex],
            paths=paths,
            before_context=context or None,
            after_context=context or None,
            max_count=MAX_LINES + 1,  # one more than shown tells that more exist
            line_number=True,
            heading=False,
            separator_field_match=MATCH_SEP,
            separator_field_context=CONTEXT_SEP,
        )
    except ValueError as e:  # ripgrep's own message, e.g. "regex parse error: ..."
        raise ToolError(f"invalid pattern or glob: {e}") from None
    return chunks


def _lines(chunk: str, rel: str, cut: int = 0) -> list[str]:
    """One file's ripgrep output as `rel:N:text` / `rel-N-text` / `--` lines: each line's
    first `cut` characters (the path ripgrep was given) go. Lines that are not a match or
    context (a binary file's notice) are left out: ripgrep skips binary files it finds while
    walking, and so do these."""
    out = []
    for line in chunk.rstrip("\n").split("\n"):
        if line == "--":  # ripgrep's separator between non-adjacent context groups
            out.append(line)
            continue
        rest = line[cut:]
        if cut:
            if rest[:1] not in (MATCH_SEP, CONTEXT_SEP):
                continue
            rest = rest[1:]
        if rest[:1].isdigit():
            out.append(_line(rel, rest))
    return out if any(line != "--" for line in out) else []


def _line(rel: str, rest: str) -> str:
    """`rel:N:text` from `N<sep>text` (the path already stripped)."""
    digits = len(rest) - len(rest.lstrip("0123456789"))
    number, sep, text = rest[:digits], rest[digits : digits + 1], rest[digits + 1 :]
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + f" [... {len(text) - MAX_LINE_CHARS} chars cut]"
    mark = ":" if sep == MATCH_SEP else "-"
    return f"{rel}{mark}{number}{mark}{text}"


def _capped(lines: list[str]) -> str:
    out: list[str] = []
    size = 0
    for line in lines:
        size += len(line.encode("utf-8")) + 1
        if len(out) == MAX_LINES or size > MAX_BYTES:
            out.append(
                f"[... more matches not shown (output capped at {MAX_LINES} lines / 50 KB); "
                "narrow the pattern, path or glob]"
            )
            break
        out.append(line)
    return "\n".join(out)

"""grep: ripgrep (in-process, via python-ripgrep) with project-relative, sorted, capped output."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Annotated

import python_ripgrep
from pydantic import Field

from claw_batch import globs
from claw_batch.errors import ToolError
from claw_batch.paths import NEVER_SEARCHED, Policy
from claw_batch.tools.base import ToolContext
from claw_batch.tools.files import is_never_listed, policy, stat_path
from claw_batch.untrusted import fence

MAX_LINES = 200
MAX_BYTES = 50_000
MAX_LINE_CHARS = 1000
# ripgrep separates path, line number and text with these instead of ':' and '-', so that
# paths containing ':' or '-3-' parse unambiguously; the model sees ':' and '-'.
MATCH_SEP = "\x00"
CONTEXT_SEP = "\x01"


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
    mode = stat_path(real, base).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise ToolError(f"{base} is not a regular file or directory; refused")
    chunks = _search(("(?i)" if ignore_case else "") + pattern, real, glob, context)
    single_file = None if stat.S_ISDIR(mode) else base
    blocks = sorted(_block(chunk, single_file, pol) for chunk in chunks)
    shown = [
        (rel, block)
        for rel, block in blocks
        if not is_never_listed(rel) and (glob is None or globs.match_file(glob, rel, base))
    ]
    lines = [line for _, block in shown for line in block]
    if not lines:
        return "no matches"
    outside = sorted({rel for rel, _ in shown if pol.is_untrusted(rel)})
    return fence(_capped(lines), ", ".join(outside)) if outside else _capped(lines)


def _search(pattern: str, real: Path, glob: str | None, context: int) -> list[str]:
    """ripgrep's output: one string per file, lines separated by newlines."""
    # A glob without '/' names files, which ripgrep filters on directly; a path glob is
    # matched in Python because ripgrep anchors it at the process's working directory.
    rg_globs = [glob] if glob and "/" not in glob else []
    try:
        chunks: list[str] = python_ripgrep.search(
            [pattern],
            paths=[str(real)],
            globs=[*rg_globs, *(f"!{d}" for d in NEVER_SEARCHED)],
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


def _block(chunk: str, single_file: str | None, pol: Policy) -> tuple[str, list[str]]:
    """One file's ripgrep output as (relative path, `rel:N:text` / `rel-N-text` / `--` lines).

    Every line of a file's chunk starts with the same path (none when a single file is
    searched), so the path's length is taken from the first line.
    """
    raw = chunk.rstrip("\n").split("\n")
    if single_file is not None:
        return single_file, [_line(single_file, line) for line in raw]
    first = raw[0]
    cut = min((i for i in (first.find(MATCH_SEP), first.find(CONTEXT_SEP)) if i >= 0), default=0)
    rel = pol.relative(Path(first[:cut]))
    return rel, [_line(rel, line if line == "--" else line[cut + 1 :]) for line in raw]


def _line(rel: str, rest: str) -> str:
    """`rel:N:text` from `N<sep>text` (the path already stripped)."""
    if rest == "--":  # ripgrep's separator between non-adjacent context groups
        return rest
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

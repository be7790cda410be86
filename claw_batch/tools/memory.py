"""remember and memory_search, the tool layer over claw_batch.memory.memoryfile (MEMORY.md,
capped, its overflow archived) and claw_batch.memory.search (progressive search of memory,
notes and archive).

remember bypasses the task's write globs on purpose (MEMORY.md and its archive are the
runner's memory files, not task outputs), but never writes outside the project root,
symlinks resolved. A job that has read outside content (ctx.taint, claw_batch.taint.jobtaint)
may call remember only when its task grants it; what it remembers is marked with its source, and it
cannot replace a fact that a trusted run or a person wrote. What memory_search finds of such
facts, and of the daily notes' quotes of such jobs, reaches the model fenced.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from claw_batch.errors import ToolError
from claw_batch.memory import memoryfile, notefiles, search
from claw_batch.safety.atomic import write_atomic
from claw_batch.taint.jobtaint import holds_marked
from claw_batch.tools.base import ToolContext
from claw_batch.tools.files import load_text, require_file

MAX_FACT_CHARS = 500
KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# Jobs of one run may call remember concurrently; the read-modify-write must not lose a fact.
# (One `claw run` per project holds the project lock, so other processes are not a concern.)
_LOCK = threading.Lock()


def _key(key: str | None) -> str | None:
    """Checked here rather than as a schema pattern, which every request would carry."""
    if key is not None and not KEY.match(key):
        raise ValueError(
            "a key is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
            "digit, e.g. release-day"
        )
    return key


Key = Annotated[
    str | None,
    AfterValidator(_key),
    Field(description="a stable name, e.g. release-day"),
]


def remember(
    ctx: ToolContext,
    *,
    text: Annotated[str, Field(description="one line, ≤ 500 characters")],
    key: Key = None,
) -> str:
    """Save a fact to MEMORY.md for later runs; the same key replaces it."""
    _refuse_secret_key(ctx, key)
    # Redacted before it is made one line (a known value with a tab or a newline in it would
    # no longer be that value), and the whole line again after: joining lines can complete a
    # credential (`Bearer` at a line's end, the token on the next), and the source that the
    # mark names is a dropped file's name.
    untrusted = ctx.taint.source
    fact = ctx.redact(memoryfile.marked(_one_line(ctx.redact(text)), untrusted))
    shown = f"{ctx.workspace}/{memoryfile.MEMORY_FILE}"
    real = _confined(ctx.root, shown)
    with _LOCK:
        lines = _load_memory(real, shown)
        if key is None:
            edit = memoryfile.add(lines, fact)
        else:
            if untrusted and memoryfile.trusted_facts(lines, key.lower()):
                raise ToolError(
                    f"refused: {key.lower()} was not remembered from untrusted content, and "
                    f"this job reads untrusted content ({untrusted}): remember it under "
                    "another key"
                )
            edit = memoryfile.upsert(lines, key.lower(), fact)
        if not edit.changed:
            return edit.reply
        return edit.reply + _save_capped(ctx, real, shown, edit)


def memory_search(
    ctx: ToolContext,
    *,
    query: Annotated[str, Field(description="words, taken literally")],
    limit: Annotated[int, Field(ge=1, le=50)] = 8,
) -> str:
    """Search MEMORY.md, daily notes and archive: keys, then headings and #tags, then text;
    newer first."""
    if not search.words(query):
        raise ToolError("query is empty; give one or more words to look for")
    found = search.search(ctx.root, ctx.workspace, query, limit=limit, today=_today(ctx))
    if not found.hits:
        return f"no memory matches {found.query!r}"
    shown = search.render(found)
    marked = sorted(
        {
            hit.path
            for hit in found.hits
            if holds_marked(ctx.workspace, hit.path, [hit.text, *(t for _, t in hit.context)])
        }
    )
    return ctx.taint.fenced(shown, ", ".join(marked)) if marked else shown


# --- remember -----------------------------------------------------------------------------------


def _save_capped(ctx: ToolContext, real: Path, shown: str, edit: memoryfile.Edit) -> str:
    """Writes MEMORY.md, first moving facts to the archive when it would be over its cap
    (archive first: a crash in between leaves a fact in both files, never in neither).
    Returns what to add to the reply."""
    moved = memoryfile.overflow(edit.lines, edit.written)
    if moved is None:
        _write(real, shown, edit.lines)
        return (
            f"; note: {shown} is {memoryfile.size(edit.lines):,} characters, over the "
            f"{memoryfile.CAP:,} the system prompt shows whole, and its headings and "
            "paragraphs alone are too long for facts to be moved out: shorten them"
        )
    if not moved:
        _write(real, shown, edit.lines)
        return ""
    day = _today(ctx)
    archive_shown = f"{ctx.workspace}/{memoryfile.archive_name(day)}"
    archive = _confined(ctx.root, archive_shown)
    existing = _load_archive(archive, archive_shown)
    _write(archive, archive_shown, memoryfile.archive_entry(existing, edit.lines, moved, day))
    _write(real, shown, memoryfile.without(edit.lines, moved))
    names = ", ".join(memoryfile.label(edit.lines, b) for b in moved)
    facts = "fact" if len(moved) == 1 else "facts"
    return (
        f"; to keep {shown} within {memoryfile.CAP:,} characters, moved {len(moved)} older "
        f"{facts} to {archive_shown} (memory_search finds them there): {names}"
    )


def _load_memory(real: Path, shown: str) -> list[str]:
    if not os.path.exists(real):
        return [memoryfile.TITLE, ""]
    require_file(real, shown, "MEMORY.md must be a file")
    lines = load_text(real, shown, "surrogateescape").split("\n")
    if lines[-1] == "":  # the newline that ends the last line does not start another one
        lines.pop()
    return lines


def _load_archive(real: Path, shown: str) -> str:
    if not os.path.exists(real):
        return ""
    require_file(real, shown, "the memory archive must be a file")
    return load_text(real, shown, "surrogateescape")


def _write(real: Path, shown: str, content: str | list[str]) -> None:
    text = content if isinstance(content, str) else "\n".join(content) + "\n"
    # surrogateescape: bytes of the file that are not UTF-8 are written back as they were
    try:
        write_atomic(real, text.encode("utf-8", "surrogateescape"))
    except OSError as e:
        raise ToolError(f"cannot write {shown}: {e.strerror or e}") from None


def _refuse_secret_key(ctx: ToolContext, key: str | None) -> None:
    """A key goes into MEMORY.md lower-cased, and so into every later system prompt: it is
    checked as it came, since a secret lower-cased is no longer the value or shape the
    redactor knows (AKIA…, a declared key). Refused rather than masked: `[REDACTED]` would
    be every such fact's key."""
    if key is not None and ctx.redact(key) != key:
        raise ToolError(
            "refused: the key looks like a secret (a credential's value or shape), and "
            f"{memoryfile.MEMORY_FILE} goes into every later prompt: name the fact in plain "
            "words, e.g. release-day"
        )


def _one_line(text: str) -> str:
    fact = " ".join(text.split())
    if not fact:
        raise ToolError("text is empty; give the fact to remember")
    if len(fact) > MAX_FACT_CHARS:
        raise ToolError(
            f"text is too long ({len(fact)} characters, limit {MAX_FACT_CHARS}); "
            "remember one short fact per call"
        )
    try:
        fact.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("text is not valid Unicode (it holds a lone surrogate)") from None
    return fact


def _today(ctx: ToolContext) -> dt.date:
    return ctx.today or dt.date.today()


def _confined(root: Path, shown: str) -> Path:
    """The real path of `shown` (symlinks resolved); refused when that is outside the project."""
    real = notefiles.confined(os.path.realpath(root), shown)
    if real is None:
        outside = os.path.realpath(os.path.join(root, shown))
        raise ToolError(f"refused: {shown} resolves to {outside}, outside the project root {root}")
    return Path(real)

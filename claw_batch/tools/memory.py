"""remember and memory_search: the agent's long-term memory in <workspace>/MEMORY.md, a Markdown
list of facts (`- key: text` or `- text`), and the runner's daily notes in <workspace>/memory/.

remember bypasses the task's write globs on purpose (MEMORY.md is the runner's memory file, not
a task output), but never writes outside the project root, symlinks resolved.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated

import python_ripgrep
from pydantic import Field

from claw_batch.atomic import write_atomic
from claw_batch.errors import ToolError
from claw_batch.tools.base import ToolContext
from claw_batch.tools.files import load_text, require_file

MEMORY_FILE = "MEMORY.md"
NOTES_DIR = "memory"
HEADING = "# Memory"
MAX_FACT_CHARS = 500
MAX_LINE_CHARS = 500  # of a search hit as shown; daily notes may hold longer lines
MAX_MATCHES_PER_FILE = 1000
KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MATCH_SEP = "\x00"  # ripgrep's field separator: unambiguous, paths and lines never hold it

_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_KEYED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,63})\s*:(?:\s|$)")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RUST_META = frozenset("\\.+*?()|[]{}^$#&-~")  # what regex_syntax::escape escapes
# Jobs of one run may call remember concurrently; the read-modify-write must not lose a fact.
# (One `claw run` per project holds the project lock, so other processes are not a concern.)
_LOCK = threading.Lock()

Key = Annotated[
    str | None,
    Field(
        pattern=KEY_PATTERN,
        description="Short stable name for the fact, e.g. release-day (lower-cased); "
        "remembering the same key again replaces the fact",
    ),
]


def remember(
    ctx: ToolContext,
    *,
    text: Annotated[str, Field(description="The fact: one line, at most 500 characters")],
    key: Key = None,
) -> str:
    """Save a fact to long-term memory (MEMORY.md in the workspace), which is loaded into the
    system prompt of later runs. Give a key for a fact that may change: a fact with the same
    key is replaced. Without a key the fact is added unless it is already there."""
    fact = _one_line(text)
    shown = _rel(ctx.workspace, MEMORY_FILE)
    real = _confined(ctx.root, shown)
    if real is None:
        raise ToolError(
            f"refused: {shown} resolves to {os.path.realpath(ctx.root / shown)}, outside the "
            f"project root {ctx.root}"
        )
    with _LOCK:
        lines = _load_memory(real, shown)
        if key is None:
            changed, done = _add(lines, fact)
        else:
            changed, done = _upsert(lines, key.lower(), fact)
        if changed:
            _save_memory(real, shown, lines)
    return done


def memory_search(
    ctx: ToolContext,
    *,
    query: Annotated[
        str,
        Field(
            description="Words to look for; lines with any of them match, more of them rank "
            "higher (case-insensitive, taken literally)"
        ),
    ],
    limit: Annotated[int, Field(ge=1, le=50, description="Most results to return")] = 8,
) -> str:
    """Search long-term memory (MEMORY.md) and the daily notes (memory/YYYY-MM-DD.md) for
    words. Prints `path:line: text`, best first: lines with more of the words, then MEMORY.md,
    then newer notes."""
    words = list(dict.fromkeys(w.lower() for w in query.split()))
    if not words:
        raise ToolError("query is empty; give one or more words to look for")
    sources = _sources(ctx.root, ctx.workspace)
    hits = _search(words, sources) if sources else []
    hits.sort(key=lambda h: (-h.score, h.source.order, h.line))
    unique = _unique(hits)
    if not unique:
        return f"no memory matches {' '.join(query.split())!r}"
    out = [f"{h.source.shown}:{h.line}: {_cut(h.text)}" for h in unique[:limit]]
    more = len(unique) - limit
    if more > 0:
        out.append(f"[{more} more matches not shown; raise limit (at most 50) or add words]")
    return "\n".join(out)


# --- remember -----------------------------------------------------------------------------------


def _load_memory(real: Path, shown: str) -> list[str]:
    if not os.path.exists(real):
        return [HEADING, ""]
    require_file(real, shown, "MEMORY.md must be a file")
    lines = load_text(real, shown, "surrogateescape").split("\n")
    if lines[-1] == "":  # the newline that ends the last line does not start another one
        lines.pop()
    return lines


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


def _save_memory(real: Path, shown: str, lines: list[str]) -> None:
    # surrogateescape: bytes of the file that are not UTF-8 are written back as they were
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
    try:
        write_atomic(real, data)
    except OSError as e:
        raise ToolError(f"cannot write {shown}: {e.strerror or e}") from None


def _add(lines: list[str], fact: str) -> tuple[bool, str]:
    if any(_fact_of(line) == fact for line in lines):
        return False, "already remembered; nothing changed"
    _append(lines, f"- {fact}")
    return True, "remembered the fact"


def _upsert(lines: list[str], key: str, fact: str) -> tuple[bool, str]:
    entry = f"- {key}: {fact}"
    where = [i for i, line in enumerate(lines) if _key_of(line) == key]
    if not where:
        _append(lines, entry)
        return True, f"remembered {key}"
    first = where[0]
    if len(where) == 1 and lines[first].strip() == entry:
        return False, f"{key} is already remembered with this text; nothing changed"
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    lines[first] = indent + entry
    for i in reversed(where[1:]):  # hand-edited duplicates of the key: keep one fact per key
        del lines[i]
    previous = "the previous fact" if len(where) == 1 else f"{len(where)} previous facts"
    return True, f"remembered {key} (replaced {previous})"


def _append(lines: list[str], entry: str) -> None:
    while lines and not lines[-1].strip():
        lines.pop()
    if lines and _BULLET.match(lines[-1]) is None:  # a blank line after a heading or paragraph
        lines.append("")
    lines.append(entry)


def _fact_of(line: str) -> str | None:
    m = _BULLET.match(line)
    return " ".join(m.group(1).split()) if m else None


def _key_of(line: str) -> str | None:
    fact = _fact_of(line)
    m = _KEYED.match(fact) if fact else None
    return m.group(1).lower() if m else None


# --- memory_search ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    real: str
    shown: str
    order: tuple[int, int, str]  # MEMORY.md, then dated notes newest first, then other notes


@dataclass(frozen=True)
class _Hit:
    source: _Source
    line: int
    text: str
    score: int


def _sources(root: Path, workspace: str) -> list[_Source]:
    candidates = [(_rel(workspace, MEMORY_FILE), (0, 0, ""))]
    names = _note_names(root, _rel(workspace, NOTES_DIR))
    candidates += [(_rel(workspace, NOTES_DIR, n), _note_order(n)) for n in names]
    sources: dict[str, _Source] = {}
    for shown, order in sorted(candidates, key=lambda c: c[1]):
        real = _confined(root, shown)
        # Only regular files inside the project: ripgrep would block on a FIFO given by name.
        if real is not None and _is_file(real) and str(real) not in sources:
            sources[str(real)] = _Source(str(real), shown, order)
    return list(sources.values())


def _note_names(root: Path, notes: str) -> list[str]:
    real = _confined(root, notes)
    if real is None or not os.path.isdir(real):
        return []
    try:
        with os.scandir(real) as it:
            return [e.name for e in it if e.name.endswith(".md") and not e.name.startswith(".")]
    except OSError as e:
        raise ToolError(f"cannot list {notes}: {e.strerror or e}") from None


def _note_order(name: str) -> tuple[int, int, str]:
    stem = name[: -len(".md")]
    if _DAY.match(stem):
        try:
            return (1, -dt.date.fromisoformat(stem).toordinal(), name)
        except ValueError:
            pass
    return (2, 0, name)


def _search(words: list[str], sources: list[_Source]) -> list[_Hit]:
    pattern = "(?i)(?:" + "|".join(map(_literal, words)) + ")"
    by_real = {s.real: s for s in sources}
    chunks: list[str] = python_ripgrep.search(
        [pattern],
        paths=list(by_real),
        max_count=MAX_MATCHES_PER_FILE,
        line_number=True,
        heading=False,
        separator_field_match=MATCH_SEP,
    )
    hits: list[_Hit] = []
    for raw in (line for chunk in chunks for line in chunk.rstrip("\n").split("\n")):
        # ripgrep prefixes the file name only when it searches more than one file
        path, _, rest = raw.partition(MATCH_SEP) if len(sources) > 1 else (sources[0].real, "", raw)
        number, _, text = rest.partition(MATCH_SEP)
        source = by_real.get(path)
        if source is None or not number.isdigit():
            continue  # not a match line, e.g. ripgrep's note on a binary file
        text = text.strip()
        lowered = text.lower()
        hits.append(_Hit(source, int(number), text, sum(w in lowered for w in words)))
    return hits


def _unique(hits: list[_Hit]) -> list[_Hit]:
    """The first (best ranked) hit of every distinct line."""
    seen: set[str] = set()
    unique = []
    for hit in hits:
        if hit.text not in seen:
            seen.add(hit.text)
            unique.append(hit)
    return unique


def _literal(word: str) -> str:
    return "".join("\\" + c if c in _RUST_META else c for c in word)


def _cut(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return text[:MAX_LINE_CHARS] + f" [... {len(text) - MAX_LINE_CHARS} chars cut]"


# --- paths --------------------------------------------------------------------------------------


def _rel(*parts: str) -> str:
    return PurePosixPath(*parts).as_posix()


def _confined(root: Path, rel: str) -> Path | None:
    """The real path of `rel`, symlinks resolved, or None when that is outside the project."""
    top = os.path.realpath(root)
    real = os.path.realpath(os.path.join(top, rel))
    return Path(real) if os.path.commonpath([top, real]) == top else None


def _is_file(real: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(real).st_mode)
    except OSError:
        return False

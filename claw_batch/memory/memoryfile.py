"""MEMORY.md, the agent's curated long-term memory: Markdown whose list items are facts
(`- key: text` or `- text`), loaded whole into the system prompt of every job.

Facts are upserted by key. The file is kept within the prompt's per-file cap: when a fact
would push it over, the oldest facts (the topmost; facts from untrusted runs before any
other) move to memory/archive/YYYY-MM.md, where memory_search still finds them. Only facts
move: headings, paragraphs and code blocks written by hand stay where they are.

These are pure functions over the file's lines; reading and writing is the caller's.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

MEMORY_FILE = "MEMORY.md"
NOTES_DIR = "memory"
ARCHIVE_DIR = "memory/archive"
TITLE = "# Memory"
# characters: the system prompt shows MEMORY.md (as each workspace file) whole up to this size
CAP = 6_000
LABEL_CHARS = 40  # of a keyless fact, when a reply names what was archived

_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_KEYED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,63})\s*:(?:\s|$)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_UNTRUSTED = re.compile(r" \(from untrusted .+\)$")


@dataclass(frozen=True)
class Block:
    """A fact: its list item's line and the lines indented under it, [start, end)."""

    start: int
    end: int
    section: str | None  # the nearest heading above it below the title (level 2 or deeper)
    untrusted: bool


@dataclass(frozen=True)
class Edit:
    lines: list[str]  # the new MEMORY.md
    changed: bool
    reply: str
    written: int  # the index of the fact's line (-1: unchanged)


def fact_of(line: str) -> str | None:
    m = _BULLET.match(line)
    return " ".join(m.group(2).split()) if m else None


def key_of(line: str) -> str | None:
    fact = fact_of(line)
    m = _KEYED.match(fact) if fact else None
    return m.group(1).lower() if m else None


def is_heading(line: str) -> bool:
    return _HEADING.match(line) is not None


def marked(fact: str, untrusted: str | None) -> str:
    """The fact as a job that reads untrusted content (`untrusted` names it) remembers it;
    the source on one line (a dropped file's name is the sender's: a line break in it would
    leave the mark on a line of its own and the fact unmarked)."""
    if not untrusted:
        return fact
    from claw_batch.safety.untrusted import printable, shown

    return f"{fact} (from untrusted {printable(shown(untrusted))})"


def is_untrusted(line: str) -> bool:
    return _UNTRUSTED.search(line.rstrip()) is not None


def add(lines: Sequence[str], fact: str) -> Edit:
    if any(fact_of(line) == fact for line in lines):
        return Edit(list(lines), False, "already remembered; nothing changed", -1)
    new = _appended(lines, f"- {fact}")
    return Edit(new, True, "remembered the fact", len(new) - 1)


def upsert(lines: Sequence[str], key: str, fact: str) -> Edit:
    entry = f"- {key}: {fact}"
    where = [i for i, line in enumerate(lines) if key_of(line) == key]
    if not where:
        new = _appended(lines, entry)
        return Edit(new, True, f"remembered {key}", len(new) - 1)
    first = where[0]
    if len(where) == 1 and lines[first].strip() == entry:
        unchanged = f"{key} is already remembered with this text; nothing changed"
        return Edit(list(lines), False, unchanged, -1)
    new = list(lines)
    indent = new[first][: len(new[first]) - len(new[first].lstrip())]
    new[first] = indent + entry
    for i in reversed(where[1:]):  # hand-edited duplicates of the key: keep one fact per key
        del new[i]
    previous = "the previous fact" if len(where) == 1 else f"{len(where)} previous facts"
    return Edit(new, True, f"remembered {key} (replaced {previous})", first)


def trusted_facts(lines: Sequence[str], key: str) -> int:
    """How many facts under `key` a run without untrusted content wrote (or a person)."""
    return sum(1 for line in lines if key_of(line) == key and not is_untrusted(line))


def size(lines: Sequence[str]) -> int:
    """Characters the system prompt takes of the file (it strips the ends)."""
    return len("\n".join(lines).strip())


def blocks(lines: Sequence[str]) -> list[Block]:
    """Every fact of the file, top to bottom; a list item nested in another one is part of
    it, and list items inside code blocks are not facts."""
    found: list[Block] = []
    section: str | None = None
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (h := _HEADING.match(line)):
            title = (h.group(2) or "").strip()
            section = title if title and len(h.group(1)) > 1 else None
        elif not fenced and (b := _BULLET.match(line)):
            end = _block_end(lines, i, len(b.group(1)))
            found.append(Block(i, end, section, any(is_untrusted(x) for x in lines[i:end])))
            i = end
            continue
        i += 1
    return found


def overflow(lines: Sequence[str], keep: int, cap: int = CAP) -> list[Block] | None:
    """The facts to move out so that the file fits in `cap` characters: facts from untrusted
    runs first, then the topmost (the oldest), never the one holding line `keep`. [] when it
    fits; None when moving every other fact out would not make it fit (its headings and
    paragraphs alone are too long): then nothing should move."""
    if size(lines) <= cap:
        return []
    movable = [b for b in blocks(lines) if not b.start <= keep < b.end]
    movable.sort(key=lambda b: (not b.untrusted, b.start))
    if size(without(lines, movable)) > cap:
        return None
    for n in range(1, len(movable) + 1):
        if size(without(lines, movable[:n])) <= cap:
            return sorted(movable[:n], key=lambda b: b.start)
    return sorted(movable, key=lambda b: b.start)  # not reached: all of them fit, checked above


def without(lines: Sequence[str], moved: Sequence[Block]) -> list[str]:
    """The lines but the moved facts' ones; a blank line the removal leaves doubled goes."""
    gone = {i for b in moved for i in range(b.start, b.end)}
    out: list[str] = []
    after_gap = False
    for i, line in enumerate(lines):
        if i in gone:
            after_gap = True
            continue
        if after_gap and not line.strip() and (not out or not out[-1].strip()):
            continue
        out.append(line)
        after_gap = after_gap and not line.strip()
    if gone:
        while out and not out[-1].strip():
            out.pop()
    return out


def archive_entry(existing: str, lines: Sequence[str], moved: Sequence[Block], day: dt.date) -> str:
    """The archive file's new text: `existing` with the moved facts appended, grouped under
    `## YYYY-MM-DD` (and the section they were in), a group continued when it is the last."""
    text = existing if existing.strip() else f"# Memory archive {day:%Y-%m}\n"
    last = next((ln for ln in reversed(text.splitlines()) if ln.startswith("## ")), None)
    for block in moved:
        heading = f"## {day.isoformat()}" + (f", from {block.section}" if block.section else "")
        body = "\n".join(_dedented(lines[block.start : block.end]))
        if heading == last:
            text = text.rstrip("\n") + "\n" + body
        else:
            text = text.rstrip("\n") + f"\n\n{heading}\n\n{body}"
            last = heading
    return text.rstrip("\n") + "\n"


def label(lines: Sequence[str], block: Block) -> str:
    """How a reply names an archived fact: its key, or the start of its text."""
    line = lines[block.start]
    key = key_of(line)
    if key:
        return key
    fact = fact_of(line) or ""
    return repr(fact if len(fact) <= LABEL_CHARS else fact[: LABEL_CHARS - 1].rstrip() + "…")


def archive_name(day: dt.date) -> str:
    return f"{ARCHIVE_DIR}/{day:%Y-%m}.md"


def _appended(lines: Sequence[str], entry: str) -> list[str]:
    new = list(lines)
    while new and not new[-1].strip():
        new.pop()
    if new and _BULLET.match(new[-1]) is None:  # a blank line after a heading or paragraph
        new.append("")
    new.append(entry)
    return new


def _block_end(lines: Sequence[str], start: int, indent: int) -> int:
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if not line.strip() or len(line) - len(line.lstrip()) <= indent or is_heading(line):
            break
        end += 1
    return end


def _dedented(block: Sequence[str]) -> list[str]:
    indent = len(block[0]) - len(block[0].lstrip())
    return [line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in block]

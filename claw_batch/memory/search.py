"""Progressive retrieval over the workspace's memory: MEMORY.md, the daily notes
(memory/YYYY-MM-DD.md, and other memory/*.md) and the archive (memory/archive/*.md).

ripgrep finds the lines that hold any of the query's words (literally, ignoring case) at the
start of a word ("ci" finds "CI" and "ci-runner", not "Decided"); each is then taken as the
best of three kinds of hit:

  (A) key      a fact `- key: ...` whose key is the query (its words joined by `-`), holds
               it, holds all its words, or is one of them;
  (B) heading  a `#` heading holding a word, or a line with a `#tag` that holds one;
  (C) fact     any other fact of MEMORY.md or the archive (a list item: it stands alone);
      text     any other line, shown with a few lines of context.

(D) A hit's score is its kind's weight (A > B > C) x the share of the words it holds x its
file's freshness (claw_batch.memory.notefiles: 1 for MEMORY.md, halved every two weeks of a daily
note's age). Identical lines count once, and so do lines shown in a better hit's context;
each further hit from a file already shown counts DIVERSITY times less.

Files are searched freshest first, in windows that grow eightfold: once `limit` hits score
more than any hit in an older file could (the key weight x the next file's freshness), the
older files are not searched, and the ranking is the same as with every file searched. A
query that recent notes do not answer searches every file: a large window in one ripgrep
call per core.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import python_ripgrep

from claw_batch.memory import memoryfile, notefiles, notes
from claw_batch.memory.notefiles import NoteFile

DIVERSITY = 0.6
WEIGHTS = {"key": 4.0, "heading": 2.0, "tag": 2.0, "fact": 1.0, "text": 1.0}
FIRST_WINDOW = 32  # files searched first (MEMORY.md and the newest notes)
WINDOW_GROWTH = 8
SPLIT_FROM = 1024  # files: a window this large is searched by ripgrep calls in parallel
CONTEXT = 2  # lines shown before and after a text hit
MAX_MATCHES_PER_FILE = 200
MAX_LINE_CHARS = 500  # of a line as shown; daily notes may hold longer lines
MATCH_SEP = "\x00"  # ripgrep's field separator: unambiguous, paths and lines never hold it

_TAG = re.compile(r"(?<![\w#&/])#([A-Za-z][\w/-]*)")
_RUST_META = frozenset("\\.+*?()|[]{}^$#&-~")  # what regex_syntax::escape escapes


@dataclass(frozen=True)
class Hit:
    path: str  # project-relative
    line: int
    kind: str  # key, heading, tag, fact or text
    text: str
    score: float
    context: tuple[tuple[int, str], ...] = ()  # (line, text) around a text hit, itself included
    daily: bool = False  # in a daily note, whose quotes of results may be cut short
    cut: str | None = None  # what the note cut of the result the hit quotes (notes.cut_mark)

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "kind": self.kind,
            "score": round(self.score, 6),
            "text": self.text,
            "context": [{"line": n, "text": t} for n, t in self.context],
            "cut": self.cut,
        }


@dataclass(frozen=True)
class Recall:
    query: str
    hits: tuple[Hit, ...]
    more: int  # further hits found in the files searched
    searched: int  # files searched
    files: int  # files there are
    complete: bool  # every file was searched

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "results": [h.as_json() for h in self.hits],
            "more": self.more,
            "files_searched": self.searched,
            "files": self.files,
        }


def words(query: str) -> list[str]:
    """The query's distinct words, lower-cased; [] for a blank query."""
    return list(dict.fromkeys(w.lower() for w in query.split()))


def search(root: Path, workspace: str, query: str, *, limit: int, today: dt.date) -> Recall:
    wanted = words(query)
    if not wanted:
        raise ValueError("empty query")
    files = notefiles.list_files(root, workspace, today)
    found: list[Hit] = []
    ranked: list[Hit] = []
    done, size = 0, FIRST_WINDOW
    while done < len(files):
        window = files[done : done + size]
        found += _grep(wanted, window, today)
        done, size = done + len(window), size * WINDOW_GROWTH
        ranked = rank(found)
        if done < len(files) and _settled(ranked, limit, files[done], today):
            break
    shown = tuple(_with_context(root, h) for h in ranked[:limit])
    text = " ".join(query.split())
    more = max(len(ranked) - limit, 0)
    return Recall(text, shown, more, done, len(files), done == len(files))


def render(found: Recall) -> str:
    """Text for the model and the terminal: `path:line [kind] text`, a text hit's context
    below it as `  n: line` (the hit) and `  n- line`."""
    out: list[str] = []
    for hit in found.hits:
        if not hit.context:
            out.append(f"{hit.path}:{hit.line} [{hit.kind}] {_cut(hit.text)}")
            continue
        out.append(f"{hit.path}:{hit.line} [{hit.kind}]")
        width = len(str(hit.context[-1][0]))
        for n, line in hit.context:
            mark = ":" if n == hit.line else "-"
            out.append(f"  {n:>{width}}{mark} {_cut(line)}")
        if hit.cut:
            out.append(f"  {hit.cut}")
    if found.more:
        at_least = "" if found.complete else "at least "
        out.append(f"[{at_least}{found.more} more matches not shown; raise limit or add words]")
    return "\n".join(out)


# --- stages A, B, C: ripgrep, then each line's kind -------------------------------------------


def _grep(wanted: list[str], window: Sequence[NoteFile], today: dt.date) -> list[Hit]:
    pattern = "(?i)(?:" + "|".join(r"\b" * _starts_word(w) + _literal(w) for w in wanted) + ")"
    parts = _split(window)
    if len(parts) == 1:
        outputs = [_ripgrep(pattern, parts[0])]
    else:  # python_ripgrep lets go of the GIL: one call per core
        with ThreadPoolExecutor(len(parts)) as pool:
            outputs = list(pool.map(functools.partial(_ripgrep, pattern), parts))
    slug = "-".join(wanted)
    fresh: dict[str, float] = {}
    hits: list[Hit] = []
    for part, output in zip(parts, outputs, strict=True):
        by_real = {f.real: f for f in part}
        for path, number, text in _matches(output, part):
            note = by_real.get(path)
            if note is None:
                continue  # not a match line, e.g. ripgrep's note on a binary file
            kind, relevance = classify(text, wanted, slug)
            if not relevance:
                continue
            if kind == "text" and note.curated and memoryfile.fact_of(text) is not None:
                kind = "fact"
            if note.day not in fresh:
                fresh[note.day] = notefiles.freshness(note.day, today)
            score = WEIGHTS[kind] * relevance * fresh[note.day]
            hits.append(Hit(note.shown, number, kind, text.strip(), score, daily=not note.curated))
    return hits


def _split(window: Sequence[NoteFile]) -> list[Sequence[NoteFile]]:
    n = min(os.cpu_count() or 1, 4) if len(window) >= SPLIT_FROM else 1
    step = -(-len(window) // n)
    return [window[i : i + step] for i in range(0, len(window), step)]


def _ripgrep(pattern: str, files: Sequence[NoteFile]) -> list[str]:
    output: list[str] = python_ripgrep.search(
        [pattern],
        paths=[f.real for f in files],
        max_count=MAX_MATCHES_PER_FILE,
        line_number=True,
        heading=False,
        separator_field_match=MATCH_SEP,
    )
    return output


def _matches(output: list[str], files: Sequence[NoteFile]) -> Iterator[tuple[str, int, str]]:
    """(real path, line number, text) of each match line."""
    only = files[0].real if len(files) == 1 else None
    for raw in (line for chunk in output for line in chunk.rstrip("\n").split("\n")):
        # ripgrep prefixes the file name only when it searches more than one file
        path, _, rest = raw.partition(MATCH_SEP) if only is None else (only, "", raw)
        number, _, text = rest.partition(MATCH_SEP)
        if number.isdigit():
            yield path, int(number), text


def classify(text: str, wanted: Sequence[str], slug: str) -> tuple[str, float]:
    """A matched line's kind, and how much of the query it holds (0: none of it, after all)."""
    lowered = text.lower()
    held = sum(1 for w in wanted if holds(lowered, w))
    if not held:
        return "text", 0.0  # ripgrep folds case beyond what lower() does
    coverage = held / len(wanted)
    key = memoryfile.key_of(text)
    if key is not None:
        if key == slug:
            return "key", 1.0
        if holds(key, slug):
            return "key", 0.8
        if len(wanted) > 1 and all(holds(key, w) for w in wanted):
            return "key", 0.6
        if key in wanted:
            return "key", 0.5 * coverage
    if memoryfile.is_heading(text):
        return "heading", coverage
    if "#" in text:
        tags = [t.lower() for t in _TAG.findall(text)]
        if any(w.lstrip("#") and holds(t, w.lstrip("#")) for w in wanted for t in tags):
            return "tag", coverage
    return "text", coverage


def holds(text: str, word: str) -> bool:
    """Whether `text` (lower-cased) holds `word` where a word starts, as the ripgrep
    pattern asks (a word that starts with punctuation, `#ci` or `.env`: anywhere)."""
    return _word(word).search(text) is not None


@functools.lru_cache(maxsize=256)
def _word(word: str) -> re.Pattern[str]:
    return re.compile(r"\b" * _starts_word(word) + re.escape(word))


def _starts_word(word: str) -> bool:
    return re.match(r"\w", word) is not None


def _literal(word: str) -> str:
    return "".join("\\" + c if c in _RUST_META else c for c in word)


# --- D: rerank ----------------------------------------------------------------------------------


def rank(hits: Sequence[Hit]) -> list[Hit]:
    """Best first: duplicates dropped, then each file's n-th hit weighed by DIVERSITY ** n."""
    kept: list[Hit] = []
    texts: set[str] = set()
    shown_lines: dict[str, list[int]] = {}  # per file, the lines of the text hits kept
    for hit in sorted(hits, key=lambda h: (-h.score, h.path, h.line)):
        if hit.text in texts:
            continue
        near = shown_lines.setdefault(hit.path, [])
        if any(abs(hit.line - n) <= CONTEXT for n in near):
            continue  # shown in the context of a better text hit from the same file
        texts.add(hit.text)
        if hit.kind == "text":
            near.append(hit.line)
        kept.append(hit)
    per_file: dict[str, int] = {}
    weighed: list[tuple[float, int, Hit]] = []
    for order, hit in enumerate(kept):
        n = per_file.get(hit.path, 0)
        per_file[hit.path] = n + 1
        weighed.append((hit.score * DIVERSITY**n, order, hit))
    weighed.sort(key=lambda w: (-w[0], w[1]))
    return [dataclasses.replace(h, score=s) for s, _, h in weighed]


def _settled(ranked: Sequence[Hit], limit: int, following: NoteFile, today: dt.date) -> bool:
    """Whether no hit in a file as fresh as `following` or older could enter the top `limit`."""
    if len(ranked) < limit:
        return False
    return ranked[limit - 1].score > WEIGHTS["key"] * notefiles.freshness(following.day, today)


def _with_context(root: Path, hit: Hit) -> Hit:
    if hit.kind != "text":
        return hit
    first, last = max(hit.line - CONTEXT, 1), hit.line + CONTEXT
    lines: list[tuple[int, str]] = []
    try:
        # newline="\n": lines as ripgrep counts them (a lone CR does not end one)
        with open(root / hit.path, encoding="utf-8", errors="replace", newline="\n") as f:
            for n, line in enumerate(f, 1):
                if n >= first and (n == hit.line or line.strip()):  # blank lines say nothing
                    lines.append((n, line.rstrip("\r\n")))
                if n >= last:
                    break
    except OSError:  # gone since ripgrep read it: the hit as found
        return hit
    cut = _entry_cut(root, hit) if hit.daily else None
    return dataclasses.replace(hit, context=tuple(lines), cut=cut)


def _entry_cut(root: Path, hit: Hit) -> str | None:
    """What the daily note cut of the result whose quote holds the hit: the note quotes a
    job's first lines, shortened, and the rest of it no search can find."""
    try:
        with open(root / hit.path, encoding="utf-8", errors="replace", newline="\n") as f:
            lines = [line.rstrip("\r\n") for line in f]
    except OSError:
        return None
    before = lines[: hit.line - 1]
    head = next((ln for ln in reversed(before) if ln.startswith("### ")), None)
    quoted: list[str] = []
    for line in lines[hit.line - 1 :]:
        if not line.startswith(">"):  # the entry's quote ends at a blank line or a head
            break
        quoted.append(line)
    return notes.cut_mark(head, quoted)


def _cut(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return text[:MAX_LINE_CHARS] + f" [... {len(text) - MAX_LINE_CHARS} chars cut]"

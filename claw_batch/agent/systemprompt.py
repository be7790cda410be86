"""The system prompt: an identity line, the workspace files, a skills list, the daily notes,
the date and the project root (SPEC §3). Short on purpose.

Ordered for providers' prefix caches, which serve a request's longest prefix that an earlier
request sent: what is the same for every job of a task and from day to day comes first (the
identity line, AGENTS/SOUL/USER/IDENTITY.md, the skills list), what changes last (MEMORY.md,
whose facts `remember` moves, the daily notes, the date, the project root). Every job of a
fan-out then shares the whole system prompt, and the next day's run shares it up to MEMORY.md.

Every job that runs gets the prompt as its files read then (a tool or an earlier task may
have changed MEMORY.md or today's note); the jobs of a fan-out share one built prompt for as
long as none of its files changed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.memory import memoryfile, notes
from claw_batch.skills import offer
from claw_batch.skills.skill import Skill

WORKSPACE_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md", "MEMORY.md")
FILE_CAP = memoryfile.CAP  # characters per workspace file
NOTES_CAP = 3_000  # characters per daily note
TOTAL_CAP = 20_000  # characters for all files and notes together
MIN_SHOWN = 200  # below this much budget a file is named, not cut to a stub
CACHE_SIZE = 256  # prompts kept (per project root, task, skills and day)

Stamp = tuple[int, int, int, int] | None  # (inode, size, mtime, ctime); None: missing


@dataclass(frozen=True)
class SystemPrompt:
    text: str
    # The same prompt with placeholders for what changes from run to run (the date, the
    # daily notes, the project's location): what replay keys are computed from.
    key_text: str
    # The key text without the skills list: what tells a job's fingerprint that the
    # workspace files changed, not the skills (claw_batch.plan.uptodate.explain).
    key_context: str
    # The call cache's key text (llm.callcache): the key text with the daily notes as their
    # owner wrote them — an edit to today's note asks anew — without the entries claw's
    # runner appends after each job (`owner_notes`), so that a job run again after a
    # Ctrl-C, a failure or a budget stop still replays what it paid for.
    call_key: str


def truncate(text: str, cap: int, source: str) -> str:
    """At most `cap` characters: the head and the tail, with a marker saying what is missing."""
    if len(text) <= cap:
        return text

    def marker(omitted: int) -> str:
        return f"\n[… {omitted} characters truncated; read {source} for the whole file …]\n"

    room = max(cap - len(marker(len(text))), 0)
    head = int(room * 0.8)
    omitted = len(text) - room
    return text[:head] + marker(omitted) + text[len(text) - (room - head) :]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _capped(text: str, cap: int, budget: int, rel: str) -> str:
    if budget < MIN_SHOWN:
        return f"[… {len(text)} characters omitted: the context budget is spent; read {rel} …]"
    return truncate(text, min(cap, budget), rel)


def _sources(workspace: str, today: dt.date) -> list[str]:
    """Project-relative paths of the files the prompt shows: workspace files, then notes."""
    days = (today - dt.timedelta(days=1), today)
    return [f"{workspace}/{name}" for name in WORKSPACE_FILES] + [
        f"{workspace}/memory/{day.isoformat()}.md" for day in days
    ]


def _stamp(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


STABLE_FILES = WORKSPACE_FILES[:4]  # before the skills list; MEMORY.md after it


def _sections(root: Path, sources: list[str]) -> tuple[dict[str, str], str, str]:
    """The workspace file sections by file name, the body of the daily notes section
    (empty: none) and the notes as the call cache's key shows them (`owner_notes`). Read,
    and the budget spent, in WORKSPACE_FILES' order."""
    sections: dict[str, str] = {}
    notes: list[str] = []
    owned: list[str] = []
    budget = TOTAL_CAP
    for n, rel in enumerate(sources):
        is_file = n < len(WORKSPACE_FILES)
        text = _read(root / rel)
        if text and not is_file and (mine := owner_notes(text)):
            owned.append(f"### {rel}\n{mine}")
        if text and is_file and WORKSPACE_FILES[n] == "MEMORY.md":
            text = _trusted_memory(text)
        elif text and not is_file:
            text = _trusted_note(text)
        if text:
            body = _capped(text, FILE_CAP if is_file else NOTES_CAP, budget, rel)
            budget -= len(body)
            if is_file:
                sections[WORKSPACE_FILES[n]] = f"## {WORKSPACE_FILES[n]}\n{body}"
            else:
                notes.append(f"### {rel}\n{body}")
    return sections, "\n\n".join(notes), "\n\n".join(owned)


# What claw's runner appends to a daily note (memory.notes: format_entry, TaskEntry.text,
# append): the `# YYYY-MM-DD` line a new note starts with, and entries — a head
# `### HH:MM TASK · STATUS · 1.2 s · 3 tokens…` (or `· 4 jobs: 4 ok ·`) and its `> ` quotes.
_NOTE_TITLE = re.compile(r"# \d{4}-\d{2}-\d{2}")
_ENTRY_HEAD = re.compile(r"### \d\d:\d\d \S.* · [\d.]+ s · [\d,]+ tokens?( · .*)?")


def owner_notes(text: str) -> str:
    """A daily note without what claw's runner appended to it, blank lines dropped: what
    the call cache's key shows of it (SystemPrompt.call_key)."""
    kept: list[str] = []
    quoted = False  # in an entry's quotes
    for line in text.splitlines():
        if quoted and line.startswith(">"):
            continue
        quoted = bool(_ENTRY_HEAD.fullmatch(line))
        if not (quoted or not line.strip() or _NOTE_TITLE.fullmatch(line)):
            kept.append(line.rstrip())
    return "\n".join(kept)


def _trusted_memory(text: str) -> str:
    """MEMORY.md without the facts remembered from untrusted content: they are outside
    content, which never goes into the system prompt (SPEC §3); memory_search finds them."""
    return _without(
        text,
        memoryfile.is_untrusted,
        "fact{s} remembered from untrusted content not shown; memory_search finds them",
    )


def _trusted_note(text: str) -> str:
    """A daily note without its quotes of jobs that read content from outside the project
    (notes.OUTSIDE): what such a job answered is that content's echo."""
    return _without(
        text,
        lambda line: line.startswith(notes.OUTSIDE),
        "line{s} quoting jobs that read outside content not shown; the note holds them",
    )


def _without(text: str, outside: Callable[[str], bool], said: str) -> str:
    """The text without the lines `outside` picks, and a line saying how many (`said`)."""
    lines = text.splitlines()
    kept = [line for line in lines if not outside(line)]
    left = len(lines) - len(kept)
    if left:
        kept.append(f"({left} {said.format(s='' if left == 1 else 's')})")
    return "\n".join(kept)


_built: dict[tuple[object, ...], tuple[list[Stamp], SystemPrompt]] = {}


def build_system_prompt(
    *, root: Path, workspace: str, task: str, skills: Sequence[Skill], today: dt.date
) -> SystemPrompt:
    """Built again only when one of its files changed since the last time (by stat): the
    files are read after they are stat'ed, so a change in between is seen next time."""
    sources = _sources(workspace, today)
    stamps = [_stamp(os.path.join(root, rel)) for rel in sources]
    key = (root, workspace, task, tuple(skills), today)
    cached = _built.get(key)
    if cached is not None and cached[0] == stamps:
        return cached[1]
    prompt = _build(root, sources, task, skills, today)
    if len(_built) >= CACHE_SIZE:
        _built.clear()
    _built[key] = (stamps, prompt)
    return prompt


def _build(
    root: Path, sources: list[str], task: str, skills: Sequence[Skill], today: dt.date
) -> SystemPrompt:
    sections, notes, owned = _sections(root, sources)
    stable = [sections[name] for name in STABLE_FILES if name in sections]
    memory = [sections["MEMORY.md"]] if "MEMORY.md" in sections else []

    def compose(notes: str, date: str, where: str, key: bool = False, listed: bool = True) -> str:
        skills_text = offer.section(skills, root, key=key) if listed else ""
        parts = [  # the same for every job and day first, what changes last (module doc)
            f"You are claw, running the task '{task}' unattended with tools; your last message "
            "without tool calls is the result.",
            *stable,
            *([skills_text] if skills_text else []),
            *memory,
            *([f"## Daily notes\n{notes}"] if notes else []),
            f"## Environment\nDate: {date}\nProject root: {where} (tool paths are relative to it)",
        ]
        return offer.SEPARATOR.join(parts) + "\n"

    date = f"{today.isoformat()} ({today.strftime('%A')})"
    placeholders = ("<daily notes>", "<today>", "<project root>")
    return SystemPrompt(
        compose(notes, date, str(root)),
        compose(*placeholders, key=True),
        compose(*placeholders, key=True, listed=False),
        compose(f"{placeholders[0]}\n{owned}".rstrip(), *placeholders[1:], key=True),
    )

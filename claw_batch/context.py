"""The system prompt: an identity line, the workspace files, the daily notes, a skills list,
the date and the project root (SPEC §3). Short on purpose."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.skills import Skill

WORKSPACE_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md", "MEMORY.md")
FILE_CAP = 6_000  # characters per workspace file
NOTES_CAP = 3_000  # characters per daily note
TOTAL_CAP = 20_000  # characters for all files and notes together
MIN_SHOWN = 200  # below this much budget a file is named, not cut to a stub


@dataclass(frozen=True)
class SystemPrompt:
    text: str
    # The same prompt with placeholders for what changes from run to run (the date, the
    # daily notes, the project's location): what replay keys are computed from.
    key_text: str


def daily_note_path(root: Path, workspace: str, day: dt.date) -> Path:
    return root / workspace / "memory" / f"{day.isoformat()}.md"


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


def _sections(root: Path, workspace: str, today: dt.date) -> tuple[list[str], str]:
    """The workspace file sections and the body of the daily notes section."""
    sections: list[str] = []
    notes: list[str] = []
    budget = TOTAL_CAP
    days = (today - dt.timedelta(days=1), today)
    sources = [
        (f"{workspace}/{name}", FILE_CAP, sections, f"## {name}") for name in WORKSPACE_FILES
    ]
    for day in days:
        rel = daily_note_path(root, workspace, day).relative_to(root).as_posix()
        sources.append((rel, NOTES_CAP, notes, f"### {rel}"))
    for rel, cap, into, header in sources:
        text = _read(root / rel)
        if text:
            body = _capped(text, cap, budget, rel)
            budget -= len(body)
            into.append(f"{header}\n{body}")
    return sections, "\n\n".join(notes) or "(none yet)"


def skills_section(skills: Sequence[Skill], root: Path) -> str:
    lines = ["## Skills", "Read a skill's SKILL.md with `read` before you use it."]
    for s in skills:
        where = s.path.relative_to(root) if s.path.is_relative_to(root) else s.path
        lines.append(f"- {s.name}: {s.description} ({where})")
    return "\n".join(lines)


def build_system_prompt(
    *, root: Path, workspace: str, task: str, skills: Sequence[Skill], today: dt.date
) -> SystemPrompt:
    sections, notes = _sections(root, workspace, today)
    skills_text = skills_section(skills, root) if skills else ""

    def compose(notes: str, date: str, where: str) -> str:
        parts = [
            f"You are claw, a headless agent running the task '{task}' of the project below. "
            "Use the tools to do the work; your last message, without tool calls, is the "
            "result.",
            *sections,
            f"## Daily notes\n{notes}",
            *([skills_text] if skills_text else []),
            f"## Environment\nDate: {date}\nProject root: {where}",
        ]
        return "\n\n".join(parts) + "\n"

    date = f"{today.isoformat()} ({today.strftime('%A')})"
    return SystemPrompt(
        compose(notes, date, str(root)), compose("<daily notes>", "<today>", "<project root>")
    )

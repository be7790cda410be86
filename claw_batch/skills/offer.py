"""What each task is offered: the skills list its system prompt carries, and what that list
costs in prompt tokens — sent with every model call of every job of the task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.config import Task
from claw_batch.skills.skill import Skill, select, shown_directory

HEADER = "## Skills (read its SKILL.md before using one)"
SEPARATOR = "\n\n"  # between the sections of a system prompt
CHARS_PER_TOKEN = 4  # the estimate the tool loop makes of a prompt (agent.loop.prompt_tokens)


def section(skills: Sequence[Skill], root: Path, *, key: bool = False) -> str:
    """The skills list of a system prompt: a line per skill (name, description, path), or
    nothing without skills. `key`: paths as replay keys and fingerprints name them."""
    if not skills:
        return ""
    lines = [HEADER]
    for s in skills:
        lines.append(f"- {s.name}: {s.description} ({shown_directory(s, root, key=key)}/SKILL.md)")
    return "\n".join(lines)


def tokens(skills: Sequence[Skill], root: Path) -> int:
    """The prompt tokens the list adds to a system prompt, estimated: its characters and
    the separator before it, 4 to a token."""
    text = section(skills, root)
    return len(text + SEPARATOR) // CHARS_PER_TOKEN if text else 0


@dataclass(frozen=True)
class Offer:
    task: str
    named: tuple[str, ...] | None  # the task's `skills:`; None: it has none (every skill)
    skills: tuple[Skill, ...]  # what it is offered
    tokens: int  # what their list adds to its system prompt (estimated)


def offers(tasks: Mapping[str, Task], available: Sequence[Skill], root: Path) -> list[Offer]:
    """Per task, in the clawfile's order, the skills it is offered of those `available`."""
    result = []
    for name, task in tasks.items():
        offered = tuple(select(available, task.skills, task.offered_tools))
        result.append(Offer(name, task.skills, offered, tokens(offered, root)))
    return result

"""What `claw skills list` and `claw skills check` say of each skill found: its state (ok,
unavailable, invalid, shadowed) and its problems and warnings, with paths as a person reads
them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.safety.paths import shown_path
from claw_batch.skills.skill import Skill, winners


@dataclass(frozen=True)
class Entry:
    skill: Skill
    shown: str  # where its SKILL.md is, project-relative when it can be
    state: str  # ok | unavailable | invalid | shadowed
    detail: str  # why (empty for ok)


@dataclass(frozen=True)
class Finding:
    shown: str
    level: str  # error | warning
    text: str


def entries(scanned: Sequence[Skill], root: Path, environ: Mapping[str, str]) -> list[Entry]:
    """One entry per skill found, the winners first (sorted by name), then the shadowed."""
    top = {s.directory.name: s for s in winners(scanned)}
    result = []
    for skill in sorted(scanned, key=lambda s: (s is not top[s.directory.name], s.directory.name)):
        winner = top[skill.directory.name]
        if skill is not winner:
            state, detail = "shadowed", f"by {shown_path(winner.path, root)} ({winner.source})"
        elif skill.problems:
            state, detail = "invalid", "; ".join(skill.problems)
        elif missing := skill.unavailable(environ):
            state, detail = "unavailable", "needs " + ", ".join(missing)
        else:
            state, detail = "ok", _offered_to(skill)
        result.append(Entry(skill, shown_path(skill.path, root), state, detail))
    return result


def _offered_to(skill: Skill) -> str:
    conditions = []
    if not skill.model_invocation:
        conditions.append("that name it in skills:")
    if skill.requires.tools:
        conditions.append("with the tools " + ", ".join(skill.requires.tools))
    return f"offered to tasks {' and '.join(conditions)}" if conditions else ""


def findings(listed: Sequence[Entry]) -> list[Finding]:
    """Errors (a skill that is not valid) and warnings (not available here, shadowed,
    front matter keys claw does not know)."""
    found = []
    for e in listed:
        found += [Finding(e.shown, "error", p) for p in e.skill.problems]
        if e.state in ("unavailable", "shadowed"):
            found.append(Finding(e.shown, "warning", f"{e.state}: {e.detail}"))
        found += [Finding(e.shown, "warning", w) for w in e.skill.warnings]
    return found

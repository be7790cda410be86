"""Agent Skills discovery: skills/<name>/SKILL.md with YAML front matter (name, description).

Precedence: workspace/skills > project skills/ > user skills (~/.config/claw/skills); a skill
shadows same-named ones below it. Only name, description and path reach the system prompt;
the model reads SKILL.md itself when it needs it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(\n|\Z)", re.DOTALL)


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path  # the SKILL.md file


def user_skills_dir() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "claw" / "skills"


def skill_dirs(root: Path, workspace: str) -> list[Path]:
    return [root / workspace / "skills", root / "skills", user_skills_dir()]


def parse_skill(skill_md: Path) -> Skill | None:
    """The skill in SKILL.md, or None when its front matter lacks a name or description."""
    try:
        text = skill_md.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = FRONT_MATTER.match(text)
    if not m:
        return None
    meta = _front_matter(m.group(1))
    if meta is None:
        return None
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not isinstance(description, str):
        return None
    return Skill(name.strip(), " ".join(description.split()), skill_md)


def _front_matter(text: str) -> dict[str, object] | None:
    """YAML front matter; skills written by hand often have an unquoted `: ` in their
    description, which strict YAML refuses, so fall back to reading `key: value` lines."""
    import yaml  # lazily: only projects with skills pay for it

    try:
        meta = yaml.safe_load(text)
    except yaml.YAMLError:
        pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
        meta = {k.strip(): v.strip() for k, v in pairs if k and not k[0].isspace()}
    return meta if isinstance(meta, dict) else None


def discover(dirs: Iterable[Path]) -> list[Skill]:
    found: dict[str, Skill] = {}
    for base in dirs:
        if not base.is_dir():
            continue
        for skill_md in sorted(base.glob("*/SKILL.md")):
            skill = parse_skill(skill_md)
            if skill is not None and skill.name not in found:
                found[skill.name] = skill
    return sorted(found.values(), key=lambda s: s.name)


def select(skills: Sequence[Skill], names: Sequence[str] | None) -> list[Skill]:
    if names is None:
        return list(skills)
    wanted = set(names)
    return [s for s in skills if s.name in wanted]


def invalid(dirs: Iterable[Path]) -> list[Path]:
    """SKILL.md files that discovery skips: no front matter, or no name or description."""
    return [
        skill_md
        for base in dirs
        if base.is_dir()
        for skill_md in sorted(base.glob("*/SKILL.md"))
        if parse_skill(skill_md) is None
    ]

"""Parsed skills, cached in `.claw/skills.json` by each SKILL.md's stat key.

Every run discovers the skills (the system prompt lists them, the quick check's task key
holds them), and parsing their front matter imports YAML: more than a no-op run should pay
for files that did not change. A SKILL.md whose inode, size and mtime are the ones cached is
taken from the cache; any other is parsed and the cache rewritten (only into an existing
`.claw/`, like the clawfile cache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from claw_batch import __version__
from claw_batch.skills.skill import SOURCES, Requires, Skill, parse_skill

CACHE = Path(".claw") / "skills.json"


def scan(root: Path, dirs: Sequence[Path], *, write: bool = True) -> list[Skill]:
    """skills.scan(dirs), through the cache in the project at `root` (rewritten when it
    changed and `write`)."""
    saved = _read(root / CACHE)
    entries: dict[str, Any] = {}
    found = []
    for source, base in zip(SOURCES, dirs, strict=False):
        if not base.is_dir():
            continue
        for path in sorted(base.glob("*/SKILL.md")):
            key = f"{source}:{path}"
            stamp = _stamp(path)
            entry = saved.get(key)
            skill = _load(entry["skill"]) if entry and entry["stamp"] == stamp else None
            if skill is None:
                skill = parse_skill(path, source)
                entry = {"stamp": stamp, "skill": _dump(skill)}
            entries[key] = entry
            found.append(skill)
    if write and entries != saved:
        _write(root / CACHE, entries)
    return found


def _stamp(path: Path) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:
        return []
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _dump(skill: Skill) -> dict[str, Any]:
    data = dataclasses.asdict(skill)
    data["path"] = str(skill.path)
    return data


def _load(data: dict[str, Any]) -> Skill | None:
    """The cached skill; None when this claw cannot read it (parse the file again)."""
    try:
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items()
        }
        fields["path"] = Path(data["path"])
        fields["requires"] = Requires(**{k: tuple(v) for k, v in data["requires"].items()})
        return Skill(**fields)
    except (KeyError, TypeError, AttributeError):
        return None


def _read(path: Path) -> dict[str, Any]:
    try:
        saved = json.loads(path.read_bytes())
        if saved.get("claw") == __version__ and isinstance(saved.get("skills"), dict):
            return dict(saved["skills"])
    except (OSError, ValueError):
        pass
    return {}


def _write(path: Path, entries: dict[str, Any]) -> None:
    from claw_batch.safety.atomic import write_atomic

    if not path.parent.is_dir():
        return  # a project that never ran: no .claw/ made for a cache
    with contextlib.suppress(OSError):  # only a cache: the next run parses again
        write_atomic(path, json.dumps({"claw": __version__, "skills": entries}, sort_keys=True))

"""`claw init`: scaffold a project from the template that ships with claw."""

from __future__ import annotations

import shutil
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

GITIGNORE_LINE = ".claw/"


def _walk(node: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            found += _walk(child, rel + "/")
        elif child.name != "__pycache__":
            found.append((rel, child))
    return found


def scaffold(target: Path) -> tuple[list[str], list[str]]:
    """Copy the template into target; never overwrite. Returns (created, kept)."""
    template = resources.files("claw_batch") / "templates" / "project"
    created, kept = [], []
    for rel, source in _walk(template):
        dest = target / rel
        if dest.exists():
            kept.append(rel)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        with source.open("rb") as src, dest.open("wb") as out:
            shutil.copyfileobj(src, out)
        created.append(rel)
    if _ensure_gitignore(target / ".gitignore"):
        created.append(".gitignore (.claw/)")
    return created, kept


def _ensure_gitignore(path: Path) -> bool:
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    if GITIGNORE_LINE in existing.split():
        return False
    sep = "" if not existing or existing.endswith("\n") else "\n"
    path.write_text(f"{existing}{sep}{GITIGNORE_LINE}\n", encoding="utf-8")
    return True

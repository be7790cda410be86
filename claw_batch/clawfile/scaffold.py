"""`claw init`: scaffold a project from the template that ships with claw."""

from __future__ import annotations

import contextlib
import os
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
    """Copy the template into target; never overwrite, and never write through a symlink
    (the target may be a cloned repository, or a folder a job wrote). Returns (created,
    kept): a kept entry exists already, or a step of its path is a symlink."""
    template = resources.files("claw_batch") / "templates" / "project"
    created: list[str] = []
    kept: list[str] = []
    for rel, source in _walk(template):
        with source.open("rb") as src:
            made = _create(target, rel, src.read())
        (created if made else kept).append(rel)
    if _ensure_gitignore(target / ".gitignore"):
        created.append(".gitignore (.claw/)")
    return created, kept


def _create(target: Path, rel: str, data: bytes) -> bool:
    """Write `data` at target/rel, each missing folder made; False when something is there
    already or a step is a symlink (followed, it could lead anywhere — as root, anywhere)."""
    *folders, name = rel.split("/")
    target.mkdir(parents=True, exist_ok=True)  # where the user asked: theirs to choose
    here = target
    for part in folders:
        here = here / part
        if here.is_symlink():
            return False
        with contextlib.suppress(FileExistsError):
            here.mkdir()
    try:
        fd = os.open(here / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except (FileExistsError, NotADirectoryError):
        return False
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return True


def _ensure_gitignore(path: Path) -> bool:
    if path.is_symlink():
        return False  # someone else's file: not ours to append to
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    if GITIGNORE_LINE in existing.split():
        return False
    sep = "" if not existing or existing.endswith("\n") else "\n"
    path.write_text(f"{existing}{sep}{GITIGNORE_LINE}\n", encoding="utf-8")
    return True

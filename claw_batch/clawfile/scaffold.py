"""`claw init`: scaffold a project from the template that ships with claw."""

from __future__ import annotations

import contextlib
import os
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import NamedTuple

from claw_batch.errors import UsageError


class OwnFiles(NamedTuple):
    """What claw writes of its own in a project, for git to leave out: a `git add -A` must
    not stage it, nor a review hook read it in the next diff."""

    line: str  # in .gitignore
    sample: str  # a path the line covers, to ask git about
    what: str


def own_files(workspace: str = "workspace") -> tuple[OwnFiles, ...]:
    """What claw writes of its own in a project (the template's workspace by default)."""
    return (
        OwnFiles(".claw/", ".claw/", "the ledger, where each hook run keeps its record"),
        OwnFiles(
            f"/{workspace}/memory/????-??-??.md",
            f"{workspace}/memory/2000-01-01.md",
            "the daily notes claw run appends",
        ),
    )


GITIGNORE = tuple(own.line for own in own_files())
GITIGNORE_NOTE = "# claw's own: the ledger and transcripts, and the daily note each run appends"


def _walk(node: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            found += _walk(child, rel + "/")
        elif child.name != "__pycache__":
            found.append((rel, child))
    return found


class Scaffolded(NamedTuple):
    created: list[str]
    kept: list[str]  # exists already, or a step of its path is a symlink
    ignored: list[str]  # the lines added to the .gitignore ("created" has it when it is new)


def scaffold(target: Path) -> Scaffolded:
    """Copy the template into target; never overwrite, and never write through a symlink
    (the target may be a cloned repository, or a folder a job wrote)."""
    template = resources.files("claw_batch") / "templates" / "project"
    _make_folder(target)
    created: list[str] = []
    kept: list[str] = []
    for rel, source in _walk(template):
        with source.open("rb") as src:
            made = _create(target, rel, src.read())
        (created if made else kept).append(rel)
    gitignore = target / ".gitignore"
    new = not gitignore.exists() and not gitignore.is_symlink()
    ignored = _ensure_gitignore(gitignore)
    if new and ignored:
        created.append(".gitignore")
    return Scaffolded(created, kept, ignored)


def _make_folder(target: Path) -> None:
    """The project folder, where the user asked (theirs to choose); a path that cannot be
    one is a usage error before anything is written."""
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        steps = [target, *target.parents]
        blocker = next((p for p in reversed(steps) if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker else e.strerror
        raise UsageError(f"cannot make a project in {target}: {why}") from e


def _create(target: Path, rel: str, data: bytes) -> bool:
    """Write `data` at target/rel, each missing folder made; False when something is there
    already or a step is a symlink (followed, it could lead anywhere — as root, anywhere)."""
    *folders, name = rel.split("/")
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


def _ensure_gitignore(path: Path) -> list[str]:
    """Append the lines of GITIGNORE the file lacks (a new file has them all); the lines
    it added."""
    if path.is_symlink():
        return []  # someone else's file: not ours to append to
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    missing = [line for line in GITIGNORE if line not in existing.splitlines()]
    if missing:
        sep = "" if not existing or existing.endswith("\n") else "\n"
        lines = "".join(f"{line}\n" for line in [GITIGNORE_NOTE, *missing])
        path.write_text(f"{existing}{sep}{lines}", encoding="utf-8")
    return missing

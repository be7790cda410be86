"""The validated clawfile, cached in `.claw/clawfile.json`.

Validating a clawfile imports pydantic, YAML, Jinja2 (and jsonschema, croniter when the
file uses them): about half a second before any work, which is more than a whole no-op run
may take. What validation read — the clawfile, the prompt files, the skill directories —
is fingerprinted; while none of it changed, the validated document is loaded as JSON and no
validator is imported (claw_batch.clawfile.load). The commands that run jobs, `claw plan`
and `claw list` write the cache (the reports leave `.claw/` as it was); `claw validate` always
validates. Only `claw list`, which takes no target to mistype, makes `.claw/` for it: in a
project that never ran, its second listing starts as fast as a run's. A project's first `claw
run` keeps it once the run has made `.claw/`, so its second run does not validate.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from claw_batch import __version__
from claw_batch.config import Clawfile, prompt_file

CACHE = Path(".claw") / "clawfile.json"
FORMAT = 5  # 2: task variables mark included templates; 3: done:/failed: keys; 4: budget:;
# 5: tasks in clawfile order (4 sorted them, and `claw list` with them)

# How load_project uses the cache; "create" writes it as "write" does, making `.claw/` first.
Use = Literal["off", "read", "write", "create"]


def cached(root: Path, path: Path) -> Clawfile | None:
    """The validated clawfile, while nothing validation read has changed since it was saved."""
    try:
        saved = json.loads((root / CACHE).read_bytes())
        if saved.get("format") != FORMAT or saved.get("claw") != __version__:
            return None
        document, variables = saved["document"], saved["variables"]
        if saved["sources"] != _sources(root, path, document):
            return None
        return Clawfile.of(document, {n: frozenset(v) for n, v in variables.items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no cache, or one this claw cannot read: validate


def save(
    root: Path,
    path: Path,
    document: dict[str, Any],
    variables: dict[str, frozenset[str]],
    *,
    create: bool = False,
) -> None:
    """Keep the validated clawfile; into `.claw/` only where it exists, unless `create`.
    Where it does not exist yet, `save_unsaved` keeps it once the run has made it."""
    folder = (root / CACHE).parent
    if folder.is_symlink():
        return  # only a cache: never written where a `.claw` link (a clone's) points
    if create:
        with contextlib.suppress(OSError):  # a read-only project: it validates every time
            folder.mkdir(exist_ok=True)
    saved = {
        "format": FORMAT,
        "claw": __version__,
        "sources": _sources(root, path, document),  # as validated, whenever it is written
        "document": document,
        "variables": {name: sorted(names) for name, names in variables.items()},
    }
    # No sort_keys: the document's order is the clawfile's, which `claw list` shows.
    _unsaved[:] = [(root / CACHE, json.dumps(saved))]
    if folder.is_dir():  # a project that never ran: a mistyped `claw run` must not create .claw/
        save_unsaved()


# The validated clawfile of a project whose `.claw/` did not exist yet: (cache file, text).
_unsaved: list[tuple[Path, str]] = []


def save_unsaved() -> None:
    """Write the cache `save` could not, into the `.claw/` a run has made since (a project's
    first run: its second starts without validating)."""
    from claw_batch.safety.atomic import write_atomic

    for target, text in _unsaved:
        if target.parent.is_dir() and not target.parent.is_symlink():
            with contextlib.suppress(OSError):  # only a cache: the next run validates again
                write_atomic(target, text)
    _unsaved.clear()


def _sources(root: Path, path: Path, document: dict[str, Any]) -> dict[str, str]:
    """A fingerprint of everything validation read."""
    sources = {path.name: _file_hash(path)}
    tasks = document["tasks"].values()
    for task in tasks:
        file = prompt_file(task.get("prompt", ""))
        if file is not None:
            sources[file] = _file_hash(root / file)
    if any(task.get("skills") for task in tasks):
        from claw_batch.skills.skill import skill_dirs

        sources["skills"] = _listing(skill_dirs(root, document["workspace"]))
    return sources


def _file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _listing(dirs: list[Path]) -> str:
    """Which skills exist where, and when each SKILL.md last changed."""
    entries = []
    for directory in dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            try:
                st = os.stat(directory / name / "SKILL.md")
            except OSError:
                continue
            entries.append(f"{directory}/{name}:{st.st_mtime_ns}:{st.st_size}")
    return hashlib.sha256("\n".join(entries).encode("utf-8", "surrogateescape")).hexdigest()

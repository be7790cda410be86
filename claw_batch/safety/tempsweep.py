"""At a run's start: claw's own temp files that a killed run left (`atomic.sweep`), removed
from every folder where this project's runs write — each task's write directories (the fixed
part of each write glob, each output's folder), the workspace and its memory folders, and
`.claw/`. A folder below those (one the write tool made) is swept when claw next writes in
it; nothing else is looked at."""

from __future__ import annotations

from pathlib import Path

from claw_batch.config import Clawfile
from claw_batch.globs import fixed_dir
from claw_batch.safety.atomic import sweep_below
from claw_batch.safety.paths import STATE_DIR


def sweep_run_folders(root: Path, config: Clawfile, *, before_ns: int) -> list[str]:
    """Removes what `atomic.sweep` calls stale, changed before `before_ns` (the run's start);
    returns the project-relative paths removed."""
    return sweep_below(root, run_folders(config), before_ns=before_ns)


def run_folders(config: Clawfile) -> list[str]:
    ws = config.workspace
    # memoryfile's NOTES_DIR and ARCHIVE_DIR, spelt out: importing it costs an up-to-date
    # run ~5 ms, and these names are the files' places on disk, which do not change.
    folders = [ws, f"{ws}/memory", f"{ws}/memory/archive", STATE_DIR]
    for task in config.tasks.values():
        # A templated output's folders are known up to its first `{{`, a glob's up to its
        # first wildcard: those are swept.
        paths = (*task.permissions.write, *(o for o in (task.output, *task.outputs) if o))
        folders += [fixed_dir(p) for p in paths]
    return list(dict.fromkeys(folders))

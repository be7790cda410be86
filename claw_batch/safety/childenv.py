"""The environment child processes start from: an allow-list, never the runner's own env
(which holds API keys). A task adds names with `permissions.env`; the sandbox then points
HOME and TMPDIR at its private /tmp."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

BASE_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TERM", "USER", "TMPDIR")


def scrubbed_env(
    passthrough: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """BASE_NAMES and the `passthrough` names that are set in `environ` (default os.environ)."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in (*BASE_NAMES, *passthrough) if name in source}
    env.setdefault("PATH", os.defpath)
    return env


# An object directory that exists and that nobody, root included, can write to.
_UNWRITABLE = "/proc/self/fdinfo"


def git_read_only(root: Path) -> dict[str, str]:
    """Environment that lets git in tool processes read the repository but write no object —
    so `git commit` and `git stash` fail — for the tools of a git hook run, sandboxed or not.
    (In the sandbox .git/ is read-only, so refs and the index cannot change either.) Empty
    outside a repository."""
    import subprocess

    try:
        done = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-path", "objects"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    objects = done.stdout.strip()
    if done.returncode != 0 or not objects:
        return {}
    return {"GIT_OBJECT_DIRECTORY": _UNWRITABLE, "GIT_ALTERNATE_OBJECT_DIRECTORIES": objects}

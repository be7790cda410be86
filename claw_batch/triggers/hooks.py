"""Git hooks: where git looks for them, the script `claw hook install` writes there, and
what a hook run hands on to the runner.

The script is plain POSIX sh. A hook that was already there is kept beside it as
`<hook>.pre-claw`, runs first and fails the hook when it fails; `uninstall` puts it back
as it was (a rename keeps content and mode).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_batch.config import Clawfile, Project
from claw_batch.errors import ClawError, UsageError

HOOKS = ("pre-commit", "commit-msg", "pre-push")
MARKER = "# installed by claw; claw hook uninstall removes it"
PROJECT_LINE = "# claw project: "
KEPT_SUFFIX = ".pre-claw"

# Paths git may hand a hook relative to the directory it runs the hook in (the top of the
# work tree): `GIT_INDEX_FILE=.git/index` in a plain `git commit`. A project in a
# subdirectory runs git from there, so they must be made absolute first.
GIT_PATH_VARIABLES = (
    "GIT_DIR",
    "GIT_INDEX_FILE",
    "GIT_WORK_TREE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_COMMON_DIR",
)


@dataclass(frozen=True)
class Place:
    """Where a project's hook goes and how the script finds the project again."""

    hooks_dir: Path
    project_dir: str  # the project root relative to the top of the work tree
    clawfile: str  # its name in the project root


def git_output(cwd: Path, *args: str) -> list[str]:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as e:
        raise ClawError(f"cannot run git: {e}") from e
    if done.returncode != 0:
        raise UsageError(
            f"{cwd} is not inside a git work tree, so there is nowhere to install a hook "
            f"({done.stderr.strip() or 'git rev-parse failed'})"
        )
    return done.stdout.splitlines()


def locate(project: Project) -> Place:
    """Ask git, as it would look for a hook: `core.hooksPath` and worktrees included."""
    hooks, top = git_output(project.root, "rev-parse", "--git-path", "hooks", "--show-toplevel")
    project_dir = os.path.relpath(project.root, os.path.realpath(top))
    # git says `../.git/hooks` from a project in a subdirectory: shown (and used) resolved
    hooks_dir = (project.root / hooks).resolve()
    return Place(hooks_dir, Path(project_dir).as_posix(), project.clawfile.name)


def script(hook: str, place: Place, python: str) -> str:
    """The hook: the kept hook first, then claw with the interpreter that installed it (or
    `claw` on PATH once that one is gone). Stdin is /dev/null: claw never waits for input."""
    claw_args = " ".join(
        shlex.quote(a)
        for a in ("hook", "run", "-C", place.project_dir, "-f", place.clawfile, hook, "--")
    )
    kept = shlex.quote(hook + KEPT_SUFFIX)
    return f"""#!/bin/sh
{MARKER}
{PROJECT_LINE}{place.project_dir}
# Git runs hooks at the top of the work tree; the project directory is relative to it.
here=$(dirname "$0")
if [ -x "$here"/{kept} ]; then
    "$here"/{kept} "$@" || exit $?
fi
python={shlex.quote(python)}
if [ -x "$python" ]; then
    exec "$python" -m claw_batch {claw_args} "$@" </dev/null
fi
if command -v claw >/dev/null 2>&1; then
    exec claw {claw_args} "$@" </dev/null
fi
echo "claw: $python is gone and there is no claw on PATH; install claw again," >&2
echo "claw: or remove this hook with: git commit --no-verify, then claw hook uninstall {hook}" >&2
exit 1
"""


def is_claws(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return MARKER.encode() in head


def installed_for(path: Path) -> str | None:
    """The project directory a claw hook runs, from its comment line."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:5]:
        if line.startswith(PROJECT_LINE):
            return line[len(PROJECT_LINE) :]
    return None


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def install(project: Project, hook: str, python: str) -> str:
    """Write the hook; says what it did. Installing twice changes nothing."""
    place = locate(project)
    path = place.hooks_dir / hook
    text = script(hook, place, python)
    if is_claws(path):
        if path.read_text(encoding="utf-8") == text:
            return f"{hook} hook already installed: {path}"
        other = installed_for(path)
        if other != place.project_dir:
            raise UsageError(
                f"{path} runs claw for the project in {other!r} already; "
                f"`claw hook uninstall {hook}` there first"
            )
    elif _exists(path):
        kept = path.with_name(hook + KEPT_SUFFIX)
        if _exists(kept):
            raise UsageError(
                f"{path} is not claw's and {kept} exists already; "
                "move one of them away and install again"
            )
        os.rename(path, kept)
    place.hooks_dir.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{hook}.claw-{os.getpid()}")
    temp.write_text(text, encoding="utf-8")
    temp.chmod(0o755)
    os.replace(temp, path)
    kept = path.with_name(hook + KEPT_SUFFIX)
    also = f" (runs the hook that was there first, kept as {kept.name})" if _exists(kept) else ""
    return f"installed the {hook} hook: {path}{also}" + _unignored(project)


def _unignored(project: Project) -> str:
    """A warning naming each line of claw's .gitignore (what `claw init` writes) that git
    does not follow: each hook run writes its record under `.claw/` and each `claw run`
    appends a daily note, so a commit would leave them untracked and `git add -A` stage
    them. Asked of git with a sample path per line, so any rule that covers it counts."""
    from claw_batch.clawfile.scaffold import own_files

    workspace = Path(project.config.workspace)
    inside = not workspace.is_absolute() and ".." not in workspace.parts
    owned = own_files(workspace.as_posix())[: None if inside else 1]
    samples = [own.sample for own in owned]
    try:
        done = subprocess.run(
            ["git", "check-ignore", "--no-index", *samples],
            cwd=project.root,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return ""
    if done.returncode not in (0, 1):  # 128: git could not tell
        return ""
    ignored = set(done.stdout.splitlines())
    missing = [own for own in owned if own.sample not in ignored]
    if not missing:
        return ""
    said = "; ".join(own.what for own in missing)
    return (
        f"\nclaw: warning: git does not ignore what claw writes of its own ({said}); "
        "add to .gitignore:" + "".join(f"\nclaw:   {own.line}" for own in missing)
    )


def uninstall(project: Project, hook: str) -> str:
    place = locate(project)
    path = place.hooks_dir / hook
    kept = path.with_name(hook + KEPT_SUFFIX)
    if _exists(path) and not is_claws(path):
        raise UsageError(f"{path} was not installed by claw (no marker line); left as it is")
    if _exists(kept):
        os.replace(kept, path)  # a rename: the old hook's content and mode, as they were
        return f"removed claw's {hook} hook and put back the one it had kept: {path}"
    if _exists(path):
        path.unlink()
        return f"removed claw's {hook} hook: {path}"
    return f"no {hook} hook installed: {path}"


def tasks_for(config: Clawfile, hook: str) -> list[str]:
    return [name for name, task in config.tasks.items() if task.hook == hook]


def files_for(hook: str, args: Sequence[str], cwd: Path, root: Path) -> tuple[str, ...]:
    """What a hook's arguments mean for `files`: the file names a pre-commit framework
    passes, commit-msg's message file; pre-push's are a remote, not files. Paths come
    relative to where the hook runs and go on relative to the project root."""
    if hook == "pre-push":
        return ()
    paths = args if hook == "pre-commit" else args[:1]
    where = os.path.realpath(cwd)
    return tuple(Path(os.path.relpath(os.path.join(where, p), root)).as_posix() for p in paths)


def absolute_git_paths(environ: Mapping[str, str], cwd: Path) -> dict[str, str]:
    """The git path variables that are relative, made absolute against `cwd`."""
    return {
        name: str(cwd / environ[name])
        for name in GIT_PATH_VARIABLES
        if environ.get(name) and not os.path.isabs(environ[name])
    }

"""What decides what a run does, and so what a job never writes (SPEC §8: a job is not the
owner): the clawfile, the prompt templates and what they include, every skills folder, the
workspace's AGENTS/SOUL/USER/IDENTITY.md and MEMORY.md, the daily notes, `.git/`, `.claw/`,
the ignore files at the root that decide what grep sees, the recorded replies a `--replay`
run answers from, and the code that runs outside a job's sandbox: an MCP server's, a notify
command's.

A task may name one of these explicitly (a literal path, no wildcard, in `permissions.write`
or as an output) to have it written — `claw validate` warns of each. `.git/`, `.claw/`, the
daily notes, MEMORY.md (which `remember` keeps) and that code cannot be granted at all.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from claw_batch.config import CLAWFILE_NAMES, McpServer, Project, Task, prompt_file
from claw_batch.safety.paths import IGNORE_FILES, STATE_DIR

PERSONA = ("AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md")
PROMPTS_DIR = "prompts"
CASSETTES_DIR = "cassettes"
_MAGIC = re.compile(r"[*?[{]|\{\{|\{%")
_INCLUDES = 20  # included templates followed, at most, per prompt
_TEMPLATE_BYTES = 1 << 20


@dataclass(frozen=True)
class Control:
    """A project's control paths: project-relative, files or folders, present or not."""

    never: tuple[str, ...]  # no task may write these, named or not
    paths: tuple[str, ...]  # nor these, but for a task that names one explicitly
    code: tuple[tuple[str, str], ...] = ()  # (path, MCP server) of the servers' code, in never
    notify: tuple[tuple[str, str], ...] = ()  # (path, task) of its notify commands' code, in never

    def named(self, path: str) -> str | None:
        """The control path `path` (project-relative) is or lies under, if any."""
        rel = clean(path)
        return next((c for c in (*self.never, *self.paths) if is_under(rel, c)), None)


def of(project: Project, cassettes: Path | None = None) -> Control:
    """The control paths of a loaded project (and of a run that replays from `cassettes`).
    Reads the prompt files (for what they include): once per run."""
    workspace = project.config.workspace
    root = project.root.resolve()
    replies = (root / (cassettes or CASSETTES_DIR)).resolve()  # what `claw run --replay` answers
    kept = (".git", STATE_DIR, f"{workspace}/memory", f"{workspace}/MEMORY.md")
    found = [
        *_clawfiles(project),
        *IGNORE_FILES,
        PROMPTS_DIR,
        *([os.path.relpath(replies, root)] if replies.is_relative_to(root) else []),
        "skills",
        f"{workspace}/skills",
        *(f"{workspace}/{name}" for name in PERSONA),
        *_templates(project),
    ]
    code = server_code(project.root, project.config.mcp_servers)
    notify = notify_code(project.root, project.config.tasks)
    never = _with_targets(project.root, (*(clean(p) for p in kept), *code, *notify))
    inside = list(_with_targets(project.root, tuple(map(clean, found))))
    paths = tuple(p for p in dict.fromkeys(inside) if not _covered(p, never, inside))
    return Control(never, paths, tuple(code.items()), tuple(notify.items()))


def server_code(root: Path, servers: Mapping[str, McpServer]) -> dict[str, str]:
    """What decides what each stdio server does, project-relative, with the server's name:
    every file or folder of the project its command names (relative to the project root,
    where it starts; `--opt=PATH` too), the whole folder of any file it names, whatever its
    language (a Python script's folder is first on its import path; a node or shell script
    loads its neighbours just as well), and for `-m a.b` the top package `a/` (or module
    `a.py`). Not the project root itself."""
    top = os.path.realpath(root)
    found: dict[str, str] = {}
    for name, server in servers.items():
        for rel in _named_code(top, server.command):
            found.setdefault(rel, name)
    return found


def notify_code(root: Path, tasks: Mapping[str, Task]) -> dict[str, str]:
    """What decides what each task's notify `command:` does, project-relative, with the task's
    name: read as a stdio server's command is (`server_code`). The command runs outside the
    sandbox, with the owner's rights: a job that rewrote it would run there too."""
    top = os.path.realpath(root)
    found: dict[str, str] = {}
    for name, task in tasks.items():
        for delivery in task.notify:
            for rel in _named_code(top, delivery.command if delivery.kind == "command" else ()):
                found.setdefault(rel, name)
    return found


def _named_code(top: str, command: Sequence[str]) -> Iterator[str]:
    """The project's files and folders `command` names (see `server_code`)."""
    for index, arg in enumerate(command):
        module = index > 0 and command[index - 1] == "-m"
        named = _module_files(arg) if module else [_path_of(arg)]
        for rel in filter(None, (_in_project(top, n) for n in named)):
            yield rel
            folder = posixpath.dirname(rel)
            if folder and os.path.isfile(os.path.join(top, rel)):
                yield folder


def _path_of(arg: str) -> str:
    """The path an argument may name: `--db=data/x.db` names `data/x.db`."""
    return arg.partition("=")[2] if arg.startswith("-") else arg


def _module_files(module: str) -> list[str]:
    """What `python -m a.b` runs: its top package `a/` whole (a module of it may import any
    other), or the module `a.py`."""
    top = module.split(".")[0]
    return [top, f"{top}.py"] if top else []


def _in_project(top: str, arg: str) -> str | None:
    """`arg` as a path inside the project that exists, project-relative; None otherwise (and
    for the root itself)."""
    if not arg or "\0" in arg:
        return None
    path = os.path.normpath(os.path.join(top, arg))  # an absolute `arg` stays as it is
    if not path.startswith(top + os.sep) or not os.path.lexists(path):
        return None
    return os.path.relpath(path, top)


def granted(task: Task) -> tuple[str, ...]:
    """The files a task names literally (no wildcard, no template, not a folder) as
    writable: its write globs without a wildcard and its literal outputs."""
    named = (*task.permissions.write, *(o for o in (task.output, *task.outputs) if o))
    return tuple(clean(p) for p in named if not _MAGIC.search(p) and not p.endswith("/"))


def _with_targets(root: Path, paths: tuple[str, ...]) -> tuple[str, ...]:
    """The paths, each followed by where it resolves to when a symlink leads elsewhere in
    the project (`workspace/AGENTS.md -> ../docs/agents.md`): claw reads the target."""
    found: list[str] = []
    top = os.path.realpath(root)
    for rel in paths:
        if rel in ("", ".", "..") or rel.startswith("/") or ".." in rel.split("/"):
            continue
        found.append(rel)
        real = os.path.realpath(os.path.join(top, rel))
        if real.startswith(top + os.sep) and real != os.path.join(top, rel):
            found.append(os.path.relpath(real, top))
    return tuple(dict.fromkeys(found))


def _clawfiles(project: Project) -> list[str]:
    """Every name claw would take as this project's clawfile (a .yml beside a .yaml is read
    once the .yaml is gone), and the one it read (`-f`)."""
    return [*CLAWFILE_NAMES, project.clawfile.name]


def _templates(project: Project) -> Iterator[str]:
    """The prompt files the tasks name, and the templates they include by a literal name
    (a name computed while rendering is not known here)."""
    seen: set[str] = set()
    for task in project.config.tasks.values():
        file = prompt_file(task.prompt)
        todo = [file] if file else included(task.prompt)
        while todo and len(seen) < _INCLUDES * len(project.config.tasks):
            name = clean(todo.pop())
            if name not in seen:
                seen.add(name)
                yield name
                todo += included(_read(project.root, name))


def read_template(root: Path, rel: str) -> str:
    """An included template's text, read as the template loader reads it: confined to the
    project, a regular file (a FIFO there would hang validate and every run), bounded;
    ToolError (or OSError) saying why it cannot be."""
    from claw_batch.errors import ToolError
    from claw_batch.safety.paths import Policy
    from claw_batch.safety.safeopen import read_file

    data = read_file(Policy(root).resolve_read(rel), rel, _TEMPLATE_BYTES)
    if len(data) > _TEMPLATE_BYTES:
        raise ToolError(f"{rel} is larger than {_TEMPLATE_BYTES:,} bytes")
    return data.decode("utf-8", errors="replace")


def _read(root: Path, rel: str) -> str | None:
    from claw_batch.errors import ToolError

    try:
        return read_template(root, rel)
    except (OSError, ToolError):
        return None  # `claw validate` says why


def included(text: str | None, *, required: bool = False) -> list[str]:
    """The literal names a template includes, imports or extends (`required`: but those of
    an `{% include ... ignore missing %}`)."""
    if not text or "{%" not in text:
        return []
    import jinja2
    from jinja2 import meta, nodes

    try:
        ast = jinja2.Environment().parse(text)
    except jinja2.TemplateError:
        return []  # `claw validate` says what is wrong with it
    optional = set()
    if required:
        optional = {
            n.template.value
            for n in ast.find_all(nodes.Include)
            if n.ignore_missing and isinstance(n.template, nodes.Const)
        }
    return [name for name in meta.find_referenced_templates(ast) if name and name not in optional]


def _covered(path: str, never: tuple[str, ...], found: list[str]) -> bool:
    """Whether `path` is never writable anyway, or lies under another control folder."""
    return any(is_under(path, n) for n in never) or any(
        path != f and is_under(path, f) for f in found
    )


def has_magic(path: str) -> bool:
    """Whether `path` is a glob or a template, not one literal path."""
    return bool(_MAGIC.search(path))


def clean(rel: str) -> str:
    return PurePosixPath(rel.strip("/")).as_posix()


def is_under(rel: str, top: str) -> bool:
    return rel == top or rel.startswith(top + "/")

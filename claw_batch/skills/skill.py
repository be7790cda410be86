"""Agent Skills: <dir>/<name>/SKILL.md with YAML front matter (`name`, `description`; optional
`license`, `compatibility`, `metadata`, `allowed-tools`, `disable-model-invocation`).

Precedence: workspace/skills > project skills/ > user skills (~/.config/claw/skills) >
built-in; a skill shadows same-named ones below it (the name is its directory's). Only the
name, description and path reach the system prompt; the model reads SKILL.md itself when it
needs it. A skill is offered only when it is valid and available: what its
`metadata.claw.requires` (or `metadata.openclaw` / `metadata.nanobot`, so that skills written
for those runners gate the same way) asks for is there — binaries on PATH (`bins`, `anyBins`),
environment variables (`env`), the OS (`os`), and claw's own `tools`: the task offers them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(\n|\Z)", re.DOTALL)
NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*\Z")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
KNOWN_KEYS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
    | {"disable-model-invocation"}
)
RUNNERS = ("claw", "openclaw", "nanobot")  # whose metadata block says what a skill requires
BUILTIN = Path(__file__).parent / "builtin"
SOURCES = ("workspace", "project", "user", "built-in")  # the order of skill_dirs()
FILE_HASH_LIMIT = 1 << 20  # bytes: a larger file of a skill is fingerprinted by size and mtime


@dataclass(frozen=True)
class Requires:
    bins: tuple[str, ...] = ()  # each on PATH
    any_bins: tuple[str, ...] = ()  # at least one on PATH
    env: tuple[str, ...] = ()  # each set and not empty
    os: tuple[str, ...] = ()  # sys.platform is one of them (darwin, linux, win32)
    tools: tuple[str, ...] = ()  # claw's: the task offers each of these tools

    def missing(self, environ: Mapping[str, str]) -> list[str]:
        """What of the machine's side is not there (tools are the task's, see `select`)."""
        path = environ.get("PATH", os.defpath)
        missing = [f"binary {b!r} on PATH" for b in self.bins if not shutil.which(b, path=path)]
        if self.any_bins and not any(shutil.which(b, path=path) for b in self.any_bins):
            missing.append("one of the binaries " + ", ".join(map(repr, self.any_bins)))
        missing += [f"environment variable {v}" for v in self.env if not environ.get(v)]
        if self.os and sys.platform not in self.os:
            missing.append(f"os {' or '.join(self.os)} (this is {sys.platform})")
        return missing


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path  # the SKILL.md file
    source: str = "project"  # one of SOURCES
    requires: Requires = Requires()
    always: bool = False  # metadata.<runner>.always: offered whatever `requires` says
    model_invocation: bool = True  # False: offered only to a task that names it in skills:
    allowed_tools: tuple[str, ...] = ()  # informational: claw's tools are the task's
    problems: tuple[str, ...] = field(default=(), compare=False)  # invalid: never offered
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def directory(self) -> Path:
        return self.path.parent

    @functools.cached_property
    def real_directory(self) -> str:
        return os.path.realpath(self.directory)

    def readable_directory(self, root: Path) -> str | None:
        """Where the read tool may read for this skill: a user's or a built-in skill's own
        directory wherever it is; a project's or workspace's only inside the project (a
        symlink out of it, which a tool could have made, opens nothing)."""
        real = self.real_directory
        if self.source in ("user", "built-in"):
            return real if real != os.path.dirname(real) else None  # never the filesystem root
        inside = real.startswith(os.path.join(os.path.realpath(root), ""))
        return real if inside else None

    def unavailable(self, environ: Mapping[str, str]) -> list[str]:
        return [] if self.always else self.requires.missing(environ)


def shown_directory(skill: Skill, root: Path, *, key: bool = False) -> str:
    """The skill's directory as the model sees it: project-relative inside the project, else
    absolute — or, for replay keys and fingerprints (`key`), named by its source, so that a
    user's home or claw's install location does not change them."""
    if key and skill.source in ("user", "built-in"):
        return f"<{skill.source} skills>/{skill.directory.name}"
    if skill.directory.is_relative_to(root):
        return skill.directory.relative_to(root).as_posix()
    return str(skill.directory)


def files(skill: Skill) -> dict[str, str]:
    """Each regular file of the skill's directory (hidden ones left out), by relative path:
    its sha256, or for one over FILE_HASH_LIMIT its size and mtime."""
    from claw_batch.store.filehash import sha256_file

    found = {}
    for directory, subdirs, names in os.walk(skill.directory):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            path = os.path.join(directory, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            rel = os.path.relpath(path, skill.directory)
            big = st.st_size > FILE_HASH_LIMIT
            found[rel] = f"{st.st_size}:{st.st_mtime_ns}" if big else sha256_file(path, st.st_size)
    return found


def user_skills_dir() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "claw" / "skills"


def skill_dirs(root: Path, workspace: str) -> list[Path]:
    """Where skills are looked for, highest precedence first (see SOURCES)."""
    return [root / workspace / "skills", root / "skills", user_skills_dir(), BUILTIN]


def scan(dirs: Sequence[Path]) -> list[Skill]:
    """Every SKILL.md under `dirs`, valid or not, in precedence order (shadowed ones too)."""
    found = []
    for source, base in zip(SOURCES, dirs, strict=False):
        if base.is_dir():
            found += [parse_skill(p, source) for p in sorted(base.glob("*/SKILL.md"))]
    return found


def discover(dirs: Sequence[Path]) -> list[Skill]:
    """The valid skill of each name that no other shadows, sorted by name."""
    return pick(scan(dirs))


def pick(scanned: Iterable[Skill]) -> list[Skill]:
    """Of skills scanned in precedence order, the valid winners, sorted by name."""
    return sorted((s for s in winners(scanned) if not s.problems), key=lambda s: s.name)


def winners(scanned: Iterable[Skill]) -> list[Skill]:
    """The first skill of each directory name: the one with precedence."""
    first: dict[str, Skill] = {}
    for skill in scanned:
        first.setdefault(skill.directory.name, skill)
    return list(first.values())


def available(skills: Iterable[Skill], environ: Mapping[str, str]) -> list[Skill]:
    return [s for s in skills if not s.unavailable(environ)]


def select(
    skills: Sequence[Skill], names: Sequence[str] | None, tools: Iterable[str]
) -> list[Skill]:
    """What a task is offered: the skills it names (all of them without `skills:`, except
    those that ask to be named), whose `requires.tools` it has."""
    offered = set(tools)
    chosen = (
        [s for s in skills if s.model_invocation]
        if names is None
        else [s for s in skills if s.name in set(names)]
    )
    return [s for s in chosen if offered.issuperset(s.requires.tools)]


# --- SKILL.md -----------------------------------------------------------------------------------


def parse_skill(skill_md: Path, source: str = "project") -> Skill:
    """The skill in SKILL.md; its `problems` say why it is not valid."""
    try:
        text = skill_md.read_text(encoding="utf-8-sig", errors="replace").replace("\r\n", "\n")
    except OSError as e:
        return _invalid(skill_md, source, f"cannot be read: {e.strerror or e}")
    m = FRONT_MATTER.match(text)
    if not m:
        return _invalid(
            skill_md,
            source,
            "no front matter: it must start with a --- block holding name and description",
        )
    meta = _yaml(m.group(1))
    if meta is None:
        return _invalid(skill_md, source, "its front matter is not a YAML mapping of keys")
    problems = _check(meta, skill_md.parent.name)
    metadata = _metadata(meta.get("metadata"))
    block = next((b for r in RUNNERS if isinstance(b := metadata.get(r), dict)), {})
    unknown = sorted(set(meta) - KNOWN_KEYS)
    return Skill(
        name=meta["name"] if isinstance(meta.get("name"), str) else skill_md.parent.name,
        description=" ".join(str(meta.get("description") or "").split()),
        path=skill_md,
        source=source,
        requires=_requires(block),
        always=block.get("always") is True,
        model_invocation=meta.get("disable-model-invocation") is not True,
        allowed_tools=_words(meta.get("allowed-tools")),
        problems=tuple(problems),
        warnings=(f"unknown front matter keys (ignored): {', '.join(unknown)}",) if unknown else (),
    )


def _invalid(skill_md: Path, source: str, problem: str) -> Skill:
    return Skill(skill_md.parent.name, "", skill_md, source, problems=(problem,))


def _yaml(text: str) -> dict[str, Any] | None:
    """YAML front matter. Skills written by hand often have an unquoted `: ` in a value
    (`description: Use it for PDFs: split, merge`), which strict YAML refuses: such values
    are quoted and the text read again."""
    import yaml  # lazily: only projects with skills pay for it

    try:
        meta = yaml.safe_load(text)
    except yaml.YAMLError:
        try:
            meta = yaml.safe_load(_PLAIN_WITH_COLON.sub(_quoted, text))
        except yaml.YAMLError:
            return None
    return {str(k): v for k, v in meta.items()} if isinstance(meta, dict) else None


# A top-level `key: value` whose plain (unquoted, not flow, not block) value holds `: `.
_PLAIN_WITH_COLON = re.compile(r"^([A-Za-z0-9_-]+):[ \t]+([^'\"{\[|>&*!\s].*: .*)$", re.M)


def _quoted(m: re.Match[str]) -> str:
    return f"{m.group(1)}: {json.dumps(m.group(2).strip())}"  # JSON strings are YAML's too


def _check(meta: Mapping[str, Any], directory: str) -> list[str]:
    """The Agent Skills rules for the keys claw reads."""
    problems = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"name is missing: give name: {directory}")
    elif len(name) > MAX_NAME:
        problems.append(f"name is {len(name)} characters long; at most {MAX_NAME}")
    elif not NAME.match(name):
        problems.append(
            f"name {name!r} may hold only lowercase letters, digits and single hyphens "
            "inside (a-z, 0-9, -)"
        )
    elif name != directory:
        problems.append(f"name {name!r} must match its directory, {directory!r}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append("description is missing: say what the skill does and when to use it")
    elif len(description) > MAX_DESCRIPTION:
        problems.append(
            f"description is {len(description)} characters long; at most {MAX_DESCRIPTION}"
        )
    compatibility = meta.get("compatibility")
    if compatibility is not None and len(str(compatibility)) > MAX_COMPATIBILITY:
        problems.append(f"compatibility is longer than {MAX_COMPATIBILITY} characters")
    flag = meta.get("disable-model-invocation")
    if flag is not None and not isinstance(flag, bool):
        problems.append(f"disable-model-invocation must be true or false, not {flag!r}")
    return problems


def _metadata(value: Any) -> dict[str, Any]:
    """`metadata:` as a mapping; OpenClaw and nanobot skills often hold it as a JSON string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return {}
    return value if isinstance(value, dict) else {}


def _requires(block: Mapping[str, Any]) -> Requires:
    """A runner block's `requires` (OpenClaw keeps `os` beside it, not in it)."""
    value = block.get("requires")
    value = value if isinstance(value, dict) else {}
    return Requires(
        bins=_words(value.get("bins")),
        any_bins=_words(value.get("anyBins", value.get("any_bins"))),
        env=_words(value.get("env")),
        os=_words(block.get("os", value.get("os"))),
        tools=_words(value.get("tools")),
    )


def _words(value: Any) -> tuple[str, ...]:
    """A list of strings, or one string of space- or comma-separated words."""
    if isinstance(value, str):
        return tuple(w for w in re.split(r"[\s,]+", value) if w)
    if isinstance(value, list):
        return tuple(str(v) for v in value if isinstance(v, (str, int)))
    return ()

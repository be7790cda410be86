"""Prompt templates: Jinja2 with StrictUndefined, the SPEC §3 variables and helpers."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_batch.errors import ClawfileError, TaskFailed, ToolError
from claw_batch.safety.untrusted import SURROGATE, Name, OutsideName, fence, printable, shown

STAGED = "git diff --cached"  # how the staged changes are named: the diff, the files' names

if TYPE_CHECKING:
    import jinja2

    from claw_batch.safety.paths import Policy

# Every name a prompt template may use (SPEC §3). `claw validate` refuses any other.
TEMPLATE_VARIABLES = frozenset(
    {"task", "today", "now", "item", "inputs", "needs", "files", "git", "read", "glob", "input"}
)

READ_HELPER_LIMIT = 200_000  # bytes a template may pull in with read()
LINE_BREAK_NEAR = 8_192  # bytes: a cut moves back to a line break this close to the limit


@dataclass(frozen=True)
class Item:
    """One fan-out file, as templates see it: `{{ item.path }}`, `{{ item.stem }}`…"""

    path: str
    name: str
    stem: str
    suffix: str
    dir: str

    @classmethod
    def of(cls, relpath: str, *, outside: bool = False) -> Item:
        """`outside`: the file came from outside the project (a watched folder): its names
        are shown defused wherever a template prints them, and used as they are by read().
        So is a name that is not UTF-8 (a byte shown as `\\xff`: no text holds it as is)."""
        parts = (relpath, *_name_parts(relpath))
        named = outside or SURROGATE.search(relpath) is not None
        return cls(*(Name(part) for part in parts)) if named else cls(*parts)

    def __str__(self) -> str:
        return self.path


def _name_parts(relpath: str) -> tuple[str, str, str, str]:
    """(name, stem, suffix, parent) as PurePosixPath gives them: by string operations for a
    plain relative path (what a fan-out's glob yields), a job's two renders each ask it."""
    components = relpath.split("/")
    if not all(c and c != "." for c in components):  # "", "/a", "a//b", "./a", "a/": pathlib's
        p = Path(relpath)
        return p.name, p.stem, p.suffix, p.parent.as_posix()
    name = components[-1]
    parent = relpath[: -len(name) - 1] if len(components) > 1 else "."
    dot = name.rfind(".")
    if 0 < dot < len(name) - 1:
        return name, name[:dot], name[dot:], parent
    return name, name, "", parent


def listing(
    names: Iterable[str],
    outside: Callable[[str], bool],
    source: str,
    saw: Callable[[str], None] | None,
) -> list[str]:
    """Project-relative names as a template gets them: those that are outside content as
    `OutsideName`s, and then the job is tainted (`saw`), as by a listing that shows them."""
    found: list[str] = [OutsideName(n, source) if outside(n) else n for n in names]
    if saw is not None and any(isinstance(n, OutsideName) for n in found):
        saw(source)
    return found


@dataclass(frozen=True)
class Upstream:
    output: str | None
    result: str
    tainted: str | None = None  # what outside content its jobs read: `result` is shown fenced


def joined(
    previous: Upstream | None, output: str | None, text: str, tainted: str | None = None
) -> Upstream:
    """What `needs.X` shows: the output path and result; fan-out items' results joined (and
    fenced as a whole when any item read outside content)."""
    if previous is None:
        return Upstream(output, text, tainted)
    return Upstream(output, previous.result + "\n" + text, previous.tainted or tainted)


class GitInfo:
    """`{{ git.staged_diff }}` and friends, computed only when a template asks."""

    def __init__(self, root: Path, saw: Callable[[str], None] | None = None) -> None:
        self._root = root
        self._saw = saw  # told when the staged diff is shown: it is outside content

    def _git(self, *args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=self._root, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TaskFailed(f"git {' '.join(args)}: {e}") from e
        return os.fsdecode(done.stdout) if done.returncode == 0 else ""  # names: any bytes

    @functools.cached_property
    def staged_diff(self) -> str:
        """The staged changes, fenced: a diff is content from outside (SPEC §3)."""
        diff = self._git("diff", "--cached", "--no-color", "--no-ext-diff")
        if self._saw is not None:
            self._saw(STAGED)
        return fence(diff, STAGED)

    @functools.cached_property
    def staged_files(self) -> list[str]:
        """The staged files' names: the stager's (a new file's name is theirs), so outside
        content as the staged diff is, listed fenced."""
        names = self._git("diff", "--cached", "--name-only", "-z").split("\0")[:-1]
        return listing(names, lambda _: True, STAGED, self._saw)

    @functools.cached_property
    def head(self) -> str:
        return self._git("rev-parse", "HEAD").strip()


@functools.cache
def environment(root: Path, untrusted: tuple[str, ...] = ()) -> jinja2.Environment:
    """Templates are data: they run in Jinja's immutable sandbox, bounded (templatesandbox)."""
    import jinja2  # lazily: a run whose jobs are all up to date renders nothing

    from claw_batch.plan.templatesandbox import BoundedSandbox, ProjectLoader

    env = BoundedSandbox(
        loader=ProjectLoader(root, untrusted),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=_shown,
    )
    env.filters["join"] = _keeps_outside(env.filters["join"])
    return env


def _shown(value: Any) -> Any:
    """What `{{ ... }}` prints: a name from outside the project as plain text on one line,
    a byte of it that is not UTF-8 (os.fsdecode's surrogate) as `\\xff`; a listed one
    (`OutsideName`) fenced as well."""
    if not isinstance(value, Name):
        return value
    if isinstance(value, OutsideName):
        return fence(shown(printable(value)), value.source)
    return printable(shown(value))


def _keeps_outside(join: Callable[..., str]) -> Callable[..., str]:
    """The `join` filter: a listing joined from outside names is one too (fenced whole)."""
    import jinja2.filters

    def joined(context: Any, value: Iterable[Any], d: str = "", attribute: Any = None) -> str:
        if attribute is not None:
            value = map(jinja2.filters.make_attrgetter(context.environment, attribute), value)
        parts = list(value)  # join makes them one text anyway
        text = join(context, parts, d)
        source = next((p.source for p in parts if isinstance(p, OutsideName)), None)
        return text if source is None else OutsideName(text, source)

    return functools.update_wrapper(joined, join)  # keeps jinja_pass_arg (the context)


@functools.cache
def helpers(root: Path, untrusted: tuple[str, ...] = ()) -> dict[str, Callable[..., Any]]:
    """`read()` and `glob()` for templates; `read()` fences a file matching `untrusted`."""
    from claw_batch.safety.paths import Policy

    outside = Policy(root, untrusted=untrusted).is_untrusted
    return {"read": reader(root, outside), "glob": globber(root, outside)}


def globber(
    root: Path, outside: Callable[[str], bool], saw: Callable[[str], None] | None = None
) -> Callable[[str], list[str]]:
    """The template `glob()`: the names that are outside content (dropped, or chosen by a
    tainted job) come as `OutsideName`s, and `saw` is told the pattern."""

    def glob(pattern: str) -> list[str]:
        from claw_batch.plan.jobs import glob_files

        return listing(glob_files(root, pattern), outside, pattern, saw)

    return glob


def reader(
    root: Path,
    outside: Callable[[str], bool],
    saw: Callable[[str], None] | None = None,
    cut: Callable[[str], None] | None = None,
) -> Callable[[str], str]:
    """The template `read()`: a file for which `outside` holds (project-relative) is fenced,
    and `saw` is told its path (the job that reads it is tainted). A file over
    READ_HELPER_LIMIT is cut, the cut marked in the text and told to `cut`."""
    made: list[Policy] = []  # made at the first read(): a Policy resolves its root

    def read(path: str) -> str:
        from claw_batch.safety.paths import Policy
        from claw_batch.safety.safeopen import read_head

        if not made:
            made.append(Policy(root))
        policy = made[0]
        real = policy.resolve_read(path)
        shown = policy.relative(real)
        # Where it was checked, and only a regular file: a FIFO swapped in would hang the run.
        data, size = read_head(real, shown, READ_HELPER_LIMIT)
        data, note = clipped(data, size, shown)
        text = data.decode("utf-8", errors="replace")
        marker = "" if note is None else f"\n[claw: {note}]\n"
        if note is not None and cut is not None:
            cut(note)
        if not outside(shown):
            return text + marker
        if saw is not None:
            saw(shown)
        return fence(text, shown) + marker  # the marker is claw's word: outside the fence

    return read


def clipped(data: bytes, size: int, shown: str) -> tuple[bytes, str | None]:
    """`data` cut to READ_HELPER_LIMIT bytes, and what was cut (None: nothing). The cut is
    at a line break when one is near, and never inside a UTF-8 character."""
    if len(data) <= READ_HELPER_LIMIT:
        return data, None
    end = READ_HELPER_LIMIT
    while end > 0 and data[end] & 0xC0 == 0x80:  # a continuation byte: inside a character
        end -= 1
    brk = data.rfind(b"\n", end - LINE_BREAK_NEAR, end)
    if brk >= 0:
        end = brk + 1
    kept = data[:end]
    lines = kept.count(b"\n")
    where = f"the end of line {lines:,}" if brk >= 0 else f"the middle of line {lines + 1:,}"
    note = (
        f"read({shown!r}) cut: the file is {size:,} bytes; the prompt holds its first {end:,}, "
        f"up to {where} (read() takes at most {READ_HELPER_LIMIT:,} bytes of a file)"
    )
    return kept, note


@functools.lru_cache(maxsize=256)
def _compiled(root: Path, untrusted: tuple[str, ...], source: str) -> jinja2.Template:
    """Templates are compiled once per run, not once per fan-out item."""
    return environment(root, untrusted).from_string(source)


def render(
    source: str,
    name: str,
    variables: Mapping[str, Any],
    *,
    root: Path,
    untrusted: tuple[str, ...] = (),
    outside: Callable[[str], bool] | None = None,
    saw: Callable[[str], None] | None = None,
) -> str:
    """Render one prompt template; any template problem is a ClawfileError naming the file.
    `untrusted`: globs of files whose content `read()` shows fenced; `outside`: which files
    are outside content (the ledger's answer; default: `untrusted`), which an `{% include %}`
    shows fenced, telling `saw`."""
    text = plain(source, variables)
    if text is not None:
        return text
    return _jinja(source, name, variables, root, untrusted, outside, saw)


# `{{ name }}` or `{{ name.part }}` of an Item, spaces around it or not: what an output path
# (`out/{{ item.stem }}.md`) and many a short prompt hold.
_PLACEHOLDER = re.compile(r"\{\{ *([A-Za-z_][A-Za-z0-9_]*)(?:\.(path|name|stem|suffix|dir))? *\}\}")
PLAIN_LIMIT = 100_000  # characters: a longer text is left to Jinja, and its bounds


def plain(source: str, variables: Mapping[str, Any]) -> str | None:
    """The template rendered without Jinja, when it is text with no brace and no carriage
    return around placeholders of plain strings (a variable that is a `str`, or a part of
    an Item that is one): the text Jinja makes of it (its finalize shows a plain string as
    it is), two fewer sandboxed renders a fan-out job. None: Jinja renders it (anything
    else, a value shown defused or fenced, a name it does not know, a surrogate)."""
    pieces = _PLACEHOLDER.split(source)  # text, name, part, text, name, part, ..., text
    for text in pieces[::3]:
        if "{" in text or "}" in text or "\r" in text:
            return None
    for i in range(1, len(pieces), 3):
        value = variables.get(pieces[i])
        part = pieces[i + 1]
        if part is not None:
            if type(value) is not Item:
                return None
            value = getattr(value, part)
        if type(value) is not str:
            return None
        pieces[i], pieces[i + 1] = value, ""
    text = "".join(pieces)
    if len(text) > PLAIN_LIMIT or SURROGATE.search(text):
        return None
    return text


def _jinja(
    source: str,
    name: str,
    variables: Mapping[str, Any],
    root: Path,
    untrusted: tuple[str, ...],
    outside: Callable[[str], bool] | None,
    saw: Callable[[str], None] | None,
) -> str:
    import jinja2

    from claw_batch.plan import templatebounds
    from claw_batch.plan.templatesandbox import reading

    if outside is None:
        from claw_batch.safety.paths import Policy

        outside = Policy(root, untrusted=untrusted).is_untrusted
    try:
        with templatebounds.metered(), reading(outside, saw):
            text = _compiled(root, untrusted, source).render(
                {**helpers(root, untrusted), **variables}
            )
        templatebounds.check_output(text)
    except (jinja2.TemplateError, ClawfileError, ToolError, OSError, *_RUNTIME_ERRORS) as e:
        raise ClawfileError(f"{name}{template_error(e)}") from e
    return text


# What a template's own expressions raise: {{ 1/0 }}, {{ x[9] }}, {{ 'a' + 1 }}, {{ 10**99999 }}
# printed; RecursionError: an {% include %} of itself; MemoryError: what the bounds missed.
_RUNTIME_ERRORS = (ArithmeticError, LookupError, TypeError, ValueError, RecursionError, MemoryError)


def template_error(error: Exception) -> str:
    """What a failed template says after its name: `:LINE: message` or `: message`."""
    import jinja2

    from claw_batch.plan.templatesandbox import refusal

    if isinstance(error, jinja2.TemplateSyntaxError):
        return f":{error.lineno}: {error.message}"
    if isinstance(error, jinja2.exceptions.SecurityError):
        return f": {refusal(error)}"
    if isinstance(error, RecursionError):
        return ": the template is nested too deeply (brackets, blocks, or an include of itself)"
    if isinstance(error, (jinja2.TemplateError, ClawfileError, ToolError, OSError)):  # read()...
        return f": {error}"
    return f": {type(error).__name__}: {error}"


def needs_view(results: Mapping[str, Upstream], names: Sequence[str]) -> dict[str, Upstream]:
    return {n: results[n] for n in names if n in results}

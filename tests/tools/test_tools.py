from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import HANG, NOT_HELD_UP, since

from claw_batch.errors import ToolError
from claw_batch.safety.childenv import scrubbed_env
from claw_batch.safety.paths import Policy
from claw_batch.sandbox.command import Command
from claw_batch.toolnames import TOOL_NAMES
from claw_batch.tools.base import ToolContext
from claw_batch.tools.bash import CONTROL_OPERATORS
from claw_batch.tools.files import MAX_FILE_BYTES
from claw_batch.tools.registry import TOOLS, tool

PROTECTED = (".git", ".claw", "workspace/memory")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    (tmp_path / "proj-evil").mkdir()
    (tmp_path / "proj-evil" / "secret.txt").write_text("secret\n")
    return proj.resolve()


def context(
    root: Path,
    *,
    write: tuple[str, ...] = ("**",),
    bash: tuple[str, ...] | bool = True,
    seconds: float = 30,
) -> ToolContext:
    policy = Policy(root, write_globs=write, protected=PROTECTED)
    deadline = time.monotonic() + seconds
    return ToolContext(root, policy, scrubbed_env(), deadline, bash_allow=bash)


def call(ctx: ToolContext, name: str, **args: object) -> str:
    return TOOLS[name].invoke(ctx, json.dumps(args))


def fails(ctx: ToolContext, name: str, **args: object) -> str:
    with pytest.raises(ToolError) as e:
        call(ctx, name, **args)
    return str(e.value)


def put(root: Path, rel: str, content: str | bytes = "x\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def numbered(first: int, last: int) -> str:
    return "".join(f"line {i}\n" for i in range(first, last + 1))


# --- the registry: schemas and validation from signatures -------------------------------------


def test_the_family() -> None:
    assert set(TOOLS) == set(TOOL_NAMES)
    assert all(name == t.name == t.spec().name for name, t in TOOLS.items())


def test_read_spec() -> None:
    spec = TOOLS["read"].spec()
    assert spec.description == (
        "Read a text file, ≤ 2000 lines / 50 KB a call; a footer says how to go on."
    )
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},  # relative to the project root: the system prompt says
            "offset": {"type": "integer", "minimum": 1, "description": "first line, 1-based"},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
    }  # unknown arguments are refused when a call is validated (test_invalid_arguments)


def test_spec_without_required_arguments_has_an_empty_list() -> None:
    assert TOOLS["ls"].spec().parameters["required"] == []
    assert TOOLS["ls"].spec().parameters["properties"]["path"]["default"] == "."


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"path": ', "invalid JSON arguments: Expecting value: line 1 column 10 (char 9)"),
        ('["a.txt"]', "arguments must be a JSON object, not list"),
        ("{}", "invalid arguments for read: path: missing (required)"),
        (
            '{"path": "a.txt", "offset": "abc"}',
            "invalid arguments for read: offset: Input should be a valid integer, "
            "unable to parse string as an integer",
        ),
        (
            '{"path": "a.txt", "offset": 0, "lines": 3}',
            "invalid arguments for read: offset: Input should be greater than or equal to 1; "
            "unknown argument 'lines' (known: path, offset, limit)",
        ),
        ('{"path": 3}', "invalid arguments for read: path: Input should be a valid string"),
    ],
)
def test_invalid_arguments(root: Path, arguments: str, message: str) -> None:
    with pytest.raises(ToolError) as e:
        TOOLS["read"].invoke(context(root), arguments)
    assert str(e.value) == message


def test_bash_timeout_bound_comes_from_the_signature(root: Path) -> None:
    assert fails(context(root), "bash", command="true", timeout=601) == (
        "invalid arguments for bash: timeout: Input should be less than or equal to 600"
    )


def test_empty_arguments_mean_none(root: Path) -> None:
    put(root, "a.txt")
    assert TOOLS["ls"].invoke(context(root), "") == "a.txt"


def test_tool_arguments_must_be_keyword_only() -> None:
    def positional(ctx: ToolContext, path: str) -> str:
        return path

    with pytest.raises(TypeError, match="argument path must be keyword-only"):
        tool("d")(positional)


# --- read --------------------------------------------------------------------------------------


def test_read_whole_small_file(root: Path) -> None:
    put(root, "a.txt", "alpha\nbeta\n")
    assert call(context(root), "read", path="a.txt") == "alpha\nbeta"
    put(root, "empty.txt", "")
    assert call(context(root), "read", path="empty.txt") == "(empty file)"


def test_read_window_footer_and_continuation(root: Path) -> None:
    put(root, "big.txt", numbered(1, 5400))
    ctx = context(root)
    first = call(ctx, "read", path="big.txt")
    assert first == numbered(1, 2000) + (
        "\n[lines 1-2000 of 5400 shown; call read with offset=2001 to continue]"
    )
    second = call(ctx, "read", path="big.txt", offset=2001)
    assert second.endswith(
        "line 4000\n\n[lines 2001-4000 of 5400 shown; call read with offset=4001 to continue]"
    )
    assert call(ctx, "read", path="big.txt", offset=4001) == numbered(4001, 5400).rstrip("\n")
    assert call(ctx, "read", path="big.txt", offset=10, limit=3) == numbered(10, 12) + (
        "\n[lines 10-12 of 5400 shown; call read with offset=13 to continue]"
    )


def test_read_stops_at_50_kb(root: Path) -> None:
    put(root, "wide.txt", ("x" * 99 + "\n") * 1000)
    out = call(context(root), "read", path="wide.txt")
    assert out.endswith("\n\n[lines 1-500 of 1000 shown; call read with offset=501 to continue]")
    put(root, "one.txt", "y" * 60_000 + "\nnext\n")
    out = call(context(root), "read", path="one.txt")
    assert out == "y" * 50_000 + (
        "\n[line 1 is longer than 50 KB; only its start is shown]"
        "\n\n[lines 1-1 of 2 shown; call read with offset=2 to continue]"
    )


def test_read_past_the_end(root: Path) -> None:
    put(root, "short.txt", numbered(1, 120))
    assert fails(context(root), "read", path="short.txt", offset=900) == (
        "offset 900 is past the end of the file (120 lines)"
    )


def test_read_refuses_what_is_not_text(root: Path) -> None:
    ctx = context(root)
    put(root, "x.bin", b"PK\x03\x04\x00\x00data")
    assert fails(ctx, "read", path="x.bin") == (
        "x.bin looks like a binary file (it contains NUL bytes); not read"
    )
    (root / "d").mkdir()
    assert fails(ctx, "read", path="d") == "d is a directory; use ls to list it"
    os.mkfifo(root / "pipe")
    assert fails(ctx, "read", path="pipe") == "pipe is not a regular file (a FIFO); refused"
    assert fails(ctx, "read", path="nope.txt") == "no such file or directory: nope.txt"
    put(root, ".claw/state.db")
    assert fails(ctx, "read", path=".claw/state.db") == (
        "refused: .claw/state.db is runner state (.claw/), which tools may not read"
    )


def test_read_replaces_invalid_utf8(root: Path) -> None:
    put(root, "latin.txt", b"caf\xe9\n")
    assert call(context(root), "read", path="latin.txt") == "caf\ufffd"


def test_read_escapes_are_refused(root: Path, tmp_path: Path) -> None:
    ctx = context(root)
    (root / "link.txt").symlink_to(tmp_path / "proj-evil" / "secret.txt")
    assert fails(ctx, "read", path="link.txt").startswith("refused reading link.txt: it resolves")
    assert fails(ctx, "read", path="../proj-evil/secret.txt").startswith(
        "refused reading ../proj-evil/secret.txt: it resolves"
    )
    assert fails(ctx, "read", path=str(tmp_path / "proj-evil" / "secret.txt")).startswith(
        "refused reading /"
    )
    put(root, "in.txt", "inside\n")
    assert call(ctx, "read", path=str(root / "in.txt")) == "inside"


KERNEL_FILES = [
    ("/proc/self/environ", f"/proc/{os.getpid()}/environ", "/proc"),
    ("/proc/1/environ", "/proc/1/environ", "/proc"),
    ("/dev/zero", "/dev/zero", "/dev"),
    ("/sys/kernel", "/sys/kernel", "/sys"),
]


@pytest.mark.parametrize(("target", "real", "top"), KERNEL_FILES)
def test_kernel_files_are_refused_through_symlinks(
    root: Path, target: str, real: str, top: str
) -> None:
    (root / "link").symlink_to(target)
    (root / "d").mkdir()
    (root / "d" / "up").symlink_to(Path(target).parent)
    ctx = context(root)
    why = f"in {top}, which tools never read or write (the kernel's and processes' own files)"
    for name, args in [
        ("read", {"path": "link"}),
        ("ls", {"path": "link"}),
        ("grep", {"pattern": "x", "path": "link"}),
        ("find", {"pattern": "*", "path": "link"}),
        ("write", {"path": "link", "content": "x"}),
        ("edit", {"path": "link", "old_string": "a", "new_string": "b"}),
    ]:
        doing = "writing" if name in ("write", "edit") else "reading"
        assert fails(ctx, name, **args) == (
            f"refused {doing} link: it resolves to {real}, {why}; use paths inside the project"
        )
    last = Path(target).name
    assert fails(ctx, "read", path=f"d/up/{last}") == (
        f"refused reading d/up/{last}: it resolves to {real}, {why}; use paths inside the project"
    )
    assert fails(ctx, "read", path=target) == (
        f"refused reading {target}: it resolves to {real}, {why}; use paths inside the project"
    )
    assert call(ctx, "grep", pattern="PATH|HOME|.") == "no matches"  # links are not followed
    assert call(ctx, "find", pattern="**") == "no files match ** in ."


def special_files(root: Path) -> dict[str, str]:
    """A FIFO (with no writer: opening it to read would block), a socket and, as root, a
    character device (/dev/zero's numbers: reading it would never end)."""
    os.mkfifo(root / "pipe")
    made = {"pipe": "a FIFO", "sock": "a socket"}
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    sock.close()
    if os.geteuid() == 0:
        os.mknod(root / "zero", 0o644 | stat.S_IFCHR, os.makedev(1, 5))
        made["zero"] = "a device"
    return made


def test_fifos_sockets_and_devices_are_refused_without_being_opened(root: Path) -> None:
    ctx = context(root)
    for name, what in special_files(root).items():
        assert fails(ctx, "read", path=name) == f"{name} is not a regular file ({what}); refused"
        assert fails(ctx, "edit", path=name, old_string="a", new_string="b") == (
            f"{name} is not a regular file ({what}); refused"
        )
        assert fails(ctx, "write", path=name, content="x") == (
            f"{name} is not a regular file ({what}); refused"
        )
        assert fails(ctx, "grep", pattern="x", path=name) == (
            f"{name} is not a regular file or directory; refused"
        )
        assert fails(ctx, "ls", path=name) == (
            f"{name} is a file, not a directory; use read to see its content"
        )
    assert stat.S_ISFIFO((root / "pipe").lstat().st_mode)  # refused, not replaced


def test_the_template_read_helper_refuses_them_too(root: Path) -> None:
    """A prompt's `{{ read(item.path) }}` reads a watched file: swapped for a FIFO, it would
    hang the run."""
    from claw_batch.plan.render import helpers

    made = special_files(root)
    (root / "env").symlink_to("/proc/self/environ")
    put(root, "a.txt", "x" * 300_000)
    read = helpers(root)["read"]
    for name, what in made.items():
        with pytest.raises(ToolError) as e:
            read(name)
        assert str(e.value) == f"{name} is not a regular file ({what}); refused"
    with pytest.raises(ToolError) as e:
        read("env")
    assert str(e.value).startswith(f"refused reading env: it resolves to /proc/{os.getpid()}/")
    assert read("a.txt") == "x" * 200_000 + (
        "\n[claw: read('a.txt') cut: the file is 300,000 bytes; the prompt holds its first "
        "200,000, up to the middle of line 1 (read() takes at most 200,000 bytes of a file)]\n"
    )


def test_folders_with_special_files_are_searched_and_listed(root: Path) -> None:
    made = special_files(root)
    put(root, "a.txt", "x marks\n")
    ctx = context(root)
    assert call(ctx, "grep", pattern="x") == "a.txt:1:x marks"
    assert call(ctx, "find", pattern="*") == "a.txt"
    assert call(ctx, "ls") == "\n".join(sorted(["a.txt", *made]))


def test_read_size_cap(root: Path) -> None:
    with open(root / "huge.log", "wb") as f:  # sparse: no disk is used
        f.truncate(MAX_FILE_BYTES + 1)
    assert fails(context(root), "read", path="huge.log") == (
        "huge.log is too large (52428801 bytes, limit 52428800); "
        "use grep to find the lines you need"
    )


def test_skill_folders_outside_the_project_are_readable(root: Path, tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "mine"
    put(skill, "SKILL.md", "---\nname: mine\n---\nRun {baseDir}/go.sh\n")
    put(skill, "go.sh", "echo go\n")
    put(tmp_path / "skills", "other.md", "not offered\n")
    policy = Policy(root, skill_dirs=(str(skill),))
    ctx = ToolContext(root, policy, scrubbed_env(), time.monotonic() + 30)
    assert call(ctx, "read", path=f"{skill}/SKILL.md") == f"---\nname: mine\n---\nRun {skill}/go.sh"
    assert call(ctx, "ls", path=str(skill)) == "SKILL.md\ngo.sh"
    assert call(ctx, "grep", pattern="echo", path=str(skill)) == f"{skill}/go.sh:1:echo go"
    assert call(ctx, "find", pattern="*.sh", path=str(skill)) == f"{skill}/go.sh"
    assert fails(ctx, "read", path=f"{tmp_path}/skills/other.md").startswith(
        f"refused reading {tmp_path}/skills/other.md: it resolves to"
    )
    assert fails(ctx, "write", path=f"{skill}/go.sh", content="x").startswith(
        f"refused writing {skill}/go.sh: it resolves to"
    )


# --- write -------------------------------------------------------------------------------------


def test_write_creates_parents_atomically(root: Path) -> None:
    out = call(context(root), "write", path="out/x/y.md", content="hello\nworld")
    assert out == "wrote 2 lines (11 bytes) to out/x/y.md"
    assert (root / "out" / "x" / "y.md").read_text() == "hello\nworld"
    assert os.listdir(root / "out" / "x") == ["y.md"]  # no temp file left behind


def test_write_keeps_the_mode_of_an_existing_file(root: Path) -> None:
    script = put(root, "run.sh", "old\n")
    script.chmod(0o751)
    call(context(root), "write", path="run.sh", content="#!/bin/sh\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert script.read_text() == "#!/bin/sh\n"


def test_write_is_confined(root: Path, tmp_path: Path) -> None:
    ctx = context(root, write=("reports/**",))
    assert fails(ctx, "write", path="notes.md", content="x") == (
        "refused: writing notes.md is not permitted; this task may write only: reports/**"
    )
    for path, under in [
        (".git/hooks/pre-commit", ".git"),
        (".claw/state.db", ".claw"),
        ("workspace/memory/2024-05-01.md", "workspace/memory"),
    ]:
        message = fails(context(root, write=("**",)), "write", path=path, content="x")
        assert message == f"refused: {path} is under {under}/, which tools may never write"
    (root / "reports").mkdir()
    (root / "reports" / "evil").symlink_to(tmp_path / "proj-evil", target_is_directory=True)
    assert fails(ctx, "write", path="reports/evil/secret.txt", content="x").startswith(
        "refused writing reports/evil/secret.txt: it resolves"
    )
    assert (tmp_path / "proj-evil" / "secret.txt").read_text() == "secret\n"


def test_write_refuses_directories_and_fifos(root: Path) -> None:
    (root / "out").mkdir()
    assert fails(context(root), "write", path="out", content="x") == (
        "out is a directory; write cannot replace a directory"
    )
    os.mkfifo(root / "pipe")
    assert fails(context(root), "write", path="pipe", content="x") == (
        "pipe is not a regular file (a FIFO); refused"
    )


def test_write_and_edit_size_cap(root: Path) -> None:
    ctx = context(root)
    big = "x" * (MAX_FILE_BYTES + 1)
    assert fails(ctx, "write", path="big.txt", content=big) == (
        "refused: the new content of big.txt is 52428801 bytes, over the limit of 52428800 "
        "for a file the tools write; nothing was written"
    )
    assert not (root / "big.txt").exists()
    put(root, "grow.txt", "ab" * 1000)
    grow = {"old_string": "b", "new_string": "b" * 60_000, "replace_all": True}
    assert fails(ctx, "edit", path="grow.txt", **grow) == (
        "refused: the new content of grow.txt is 60001000 bytes, over the limit of 52428800 "
        "for a file the tools write; nothing was written"
    )
    assert (root / "grow.txt").read_text() == "ab" * 1000
    assert os.listdir(root) == ["grow.txt"]


def test_write_and_edit_replace_the_file_by_rename(root: Path) -> None:
    """Atomic: a reader holding the old file keeps reading the old bytes, no temp file stays."""
    path = put(root, "a.txt", "old\n")
    with path.open() as reader:
        call(context(root), "write", path="a.txt", content="new\n")
        call(context(root), "edit", path="a.txt", old_string="new", new_string="newer")
        assert reader.read() == "old\n"
    assert path.read_text() == "newer\n"
    assert os.listdir(root) == ["a.txt"]


# --- edit --------------------------------------------------------------------------------------


def test_edit_unique(root: Path) -> None:
    put(root, "a.py", "x = 1\ny = 2\n")
    assert call(context(root), "edit", path="a.py", old_string="y = 2", new_string="y = 3") == (
        "replaced 1 occurrence in a.py (line 2)"
    )
    assert (root / "a.py").read_text() == "x = 1\ny = 3\n"


def test_edit_not_found(root: Path) -> None:
    put(root, "a.py", "def f():\n    return 1\n")
    ctx = context(root)
    assert fails(ctx, "edit", path="a.py", old_string="return 2", new_string="return 3") == (
        "old_string not found in a.py; read the file and copy the exact text to replace"
    )
    assert fails(ctx, "edit", path="a.py", old_string="def f():\nreturn 1", new_string="") == (
        "old_string not found in a.py, but it matches if whitespace is ignored; "
        "copy the exact indentation and line breaks from read"
    )


def test_edit_several_matches(root: Path) -> None:
    put(root, "a.py", "x = 1\ny = 2\nx = 1\n")
    ctx = context(root)
    assert fails(ctx, "edit", path="a.py", old_string="x = 1", new_string="x = 0") == (
        "old_string occurs 2 times in a.py (lines 1, 3); "
        "add context to make it unique or set replace_all"
    )
    assert (root / "a.py").read_text() == "x = 1\ny = 2\nx = 1\n"
    out = call(ctx, "edit", path="a.py", old_string="x = 1", new_string="x = 0", replace_all=True)
    assert out == "replaced 2 occurrences in a.py (lines 1, 3)"
    assert (root / "a.py").read_text() == "x = 0\ny = 2\nx = 0\n"


def test_edit_refusals(root: Path) -> None:
    put(root, "a.py", "x\n")
    ctx = context(root)
    assert fails(ctx, "edit", path="a.py", old_string="x", new_string="x") == (
        "old_string and new_string are identical; there is nothing to change"
    )
    assert fails(ctx, "edit", path="a.py", old_string="", new_string="y") == (
        "old_string is empty; use write to create or replace a whole file"
    )
    assert fails(
        context(root, write=("docs/**",)), "edit", path="a.py", old_string="x", new_string="y"
    ) == ("refused: writing a.py is not permitted; this task may write only: docs/**")


def test_edit_keeps_bytes_that_are_not_utf8(root: Path) -> None:
    put(root, "a.txt", b"caf\xe9\nold\n")
    call(context(root), "edit", path="a.txt", old_string="old", new_string="new")
    assert (root / "a.txt").read_bytes() == b"caf\xe9\nnew\n"


# --- ls and find -------------------------------------------------------------------------------


def test_ls(root: Path, tmp_path: Path) -> None:
    put(root, "b.txt")
    put(root, "a/x.txt")
    put(root, ".hidden")
    ctx = context(root)
    assert call(ctx, "ls") == ".hidden\na/\nb.txt"
    assert call(ctx, "ls", path="a") == "x.txt"
    (root / "empty").mkdir()
    assert call(ctx, "ls", path="empty") == "empty is empty"
    assert fails(ctx, "ls", path="b.txt") == (
        "b.txt is a file, not a directory; use read to see its content"
    )
    assert fails(ctx, "ls", path="../proj-evil").startswith("refused reading ../proj-evil: it")


def test_ls_is_capped(root: Path) -> None:
    for i in range(520):
        (root / f"f{i:03}").touch()
    lines = call(context(root), "ls").split("\n")
    assert len(lines) == 501
    assert lines[-2:] == ["f499", "[... 20 more entries not shown]"]


def test_find(root: Path) -> None:
    for rel in ("README.md", "docs/a.md", "docs/sub/b.md", "docs/c.txt", ".git/x.md"):
        put(root, rel)
    put(root, ".claw/runs/y.md")
    ctx = context(root)
    assert call(ctx, "find", pattern="*.md") == "README.md\ndocs/a.md\ndocs/sub/b.md"
    assert call(ctx, "find", pattern="docs/*.md") == "docs/a.md"
    assert call(ctx, "find", pattern="**/*.md", path="docs") == "docs/a.md\ndocs/sub/b.md"
    assert call(ctx, "find", pattern="sub/*.md", path="docs") == "docs/sub/b.md"
    assert call(ctx, "find", pattern="*.md", path=".git") == "no files match *.md in .git"
    assert call(ctx, "find", pattern="*.rs") == "no files match *.rs in ."


def test_find_is_capped(root: Path) -> None:
    (root / "d").mkdir()
    for i in range(1010):
        (root / "d" / f"{i:04}.txt").touch()
    lines = call(context(root), "find", pattern="*.txt").split("\n")
    assert len(lines) == 1001
    assert lines[-2:] == ["d/0999.txt", "[... 10 more files not shown; narrow the pattern or path]"]


# --- grep --------------------------------------------------------------------------------------


@pytest.fixture
def corpus(root: Path) -> Path:
    put(root, "d/a.txt", "hello world\nfoo\nbar\nx\ny\nz\nHello again\n")
    put(root, "d/sub/b.md", "hello sub\n")
    put(root, "c.md", "nothing here\n")
    put(root, ".git/x", "hello git\n")
    put(root, ".claw/y", "hello state\n")
    return root


def test_grep_matches(corpus: Path) -> None:
    ctx = context(corpus)
    assert call(ctx, "grep", pattern="hello") == "d/a.txt:1:hello world\nd/sub/b.md:1:hello sub"
    assert call(ctx, "grep", pattern="hello", path="d/a.txt") == "d/a.txt:1:hello world"
    assert call(ctx, "grep", pattern="nope") == "no matches"
    assert call(ctx, "grep", pattern="hello", path=".git") == "no matches"


def test_grep_context_glob_and_case(corpus: Path) -> None:
    ctx = context(corpus)
    assert call(ctx, "grep", pattern="hello", ignore_case=True, context=1, glob="*.txt") == (
        "d/a.txt:1:hello world\nd/a.txt-2-foo\n--\nd/a.txt-6-z\nd/a.txt:7:Hello again"
    )
    assert call(ctx, "grep", pattern="hello", glob="d/sub/*") == "d/sub/b.md:1:hello sub"
    assert call(ctx, "grep", pattern="hello", path="d", glob="sub/*.md") == (
        "d/sub/b.md:1:hello sub"
    )


def test_grep_invalid_regex(corpus: Path) -> None:
    assert fails(context(corpus), "grep", pattern="(") == (
        "invalid pattern or glob: regex parse error:\n    (?:()\n    ^\nerror: unclosed group"
    )


def test_grep_does_not_leave_the_project(corpus: Path, tmp_path: Path) -> None:
    (corpus / "evil").symlink_to(tmp_path / "proj-evil", target_is_directory=True)
    ctx = context(corpus)
    assert call(ctx, "grep", pattern="secret") == "no matches"
    assert fails(ctx, "grep", pattern="secret", path="evil").startswith("refused reading evil")
    assert fails(ctx, "grep", pattern="x", path=".claw").startswith("refused: .claw is runner")
    os.mkfifo(corpus / "pipe")
    assert fails(ctx, "grep", pattern="x", path="pipe") == (
        "pipe is not a regular file or directory; refused"
    )


def test_grep_searches_every_file_when_fds_run_short(root: Path) -> None:
    """grep holds an fd per file while ripgrep reads a batch: with few fds left (-j 32 jobs
    grepping at once under a soft limit of 1,024), it searches smaller batches, not fewer
    files."""
    for i in range(100):
        put(root, f"d/{i:03}.txt", "needle\n")
    ctx = context(root)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = {int(fd) for fd in os.listdir("/proc/self/fd")}
    free = (n for n in itertools.count() if n not in used)
    room = next(itertools.islice(free, 10, None))  # a limit that leaves ten fds free
    resource.setrlimit(resource.RLIMIT_NOFILE, (room, hard))
    try:
        out = call(ctx, "grep", pattern="needle")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert out == "\n".join(f"d/{i:03}.txt:1:needle" for i in range(100))


def test_grep_is_capped(root: Path) -> None:
    put(root, "many.txt", "match\n" * 300)
    lines = call(context(root), "grep", pattern="match").split("\n")
    assert len(lines) == 201
    assert lines[-2:] == [
        "many.txt:200:match",
        "[... more matches not shown (output capped at 200 lines / 50 KB); "
        "narrow the pattern, path or glob]",
    ]


# --- bash --------------------------------------------------------------------------------------


def test_bash_runs_in_the_root_with_exit_code(root: Path) -> None:
    ctx = context(root)
    assert call(ctx, "bash", command="pwd") == f"exit code 0\n{root}"
    assert call(ctx, "bash", command="echo out; echo err >&2; exit 3") == "exit code 3\nout\nerr"
    assert call(ctx, "bash", command="true") == "exit code 0\n(no output)"
    assert call(ctx, "bash", command="kill -9 $$") == "killed by signal SIGKILL\n(no output)"


def test_bash_permissions(root: Path) -> None:
    assert fails(context(root, bash=False), "bash", command="ls") == (
        "bash is not enabled for this task; use the other tools"
    )
    ctx = context(root, bash=("echo *", "git status"))
    assert call(ctx, "bash", command="echo hi there") == "exit code 0\nhi there"
    assert fails(ctx, "bash", command="ls") == (
        "bash command refused: it must match one of: echo *, git status"
    )
    assert fails(ctx, "bash", command="git status --short") == (
        "bash command refused: it must match one of: echo *, git status"
    )


@pytest.mark.parametrize("operator", CONTROL_OPERATORS)
def test_bash_patterns_refuse_shell_operators(root: Path, operator: str) -> None:
    ctx = context(root, bash=("echo *",))
    assert fails(ctx, "bash", command=f"echo a {operator} touch pwned") == (
        f"bash command refused: {operator!r} is not allowed; run a single command without "
        "shell operators that matches one of: echo *"
    )
    assert not (root / "pwned").exists()


def test_bash_env_is_scrubbed(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    ctx = context(root)
    out = call(ctx, "bash", command='echo "key=${OPENAI_API_KEY:-unset} lang=$LANG"')
    assert out == "exit code 0\nkey=unset lang=C.UTF-8"


def test_scrubbed_env() -> None:
    environ = {"PATH": "/bin", "HOME": "/h", "OPENAI_API_KEY": "sk", "GITHUB_TOKEN": "t", "X": "1"}
    assert scrubbed_env(environ=environ) == {"PATH": "/bin", "HOME": "/h"}
    assert scrubbed_env(["X", "UNSET"], environ=environ) == {"PATH": "/bin", "HOME": "/h", "X": "1"}
    assert scrubbed_env(environ={})["PATH"] == os.defpath


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pid: int, within: float = HANG) -> bool:
    end = time.monotonic() + within
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.02)
    return not alive(pid)


def test_bash_timeout_kills_background_children(root: Path) -> None:
    started = time.monotonic()
    out = call(
        context(root),
        "bash",
        command="sleep 300 & echo $! > pid; echo started; sleep 300",
        timeout=1,
    )
    assert 1 <= since(started) < NOT_HELD_UP  # waited for the timeout, not for the sleeps
    assert out == "timed out after 1 s (the command and its children were killed)\nstarted"
    assert gone(int((root / "pid").read_text()))


def test_bash_background_child_cannot_hang_the_call(root: Path) -> None:
    started = time.monotonic()
    out = call(context(root), "bash", command="sleep 300 & echo $! > pid; echo done")
    assert since(started) < NOT_HELD_UP  # not held up by the background sleep
    assert out == "exit code 0\ndone"
    assert gone(int((root / "pid").read_text()))


def test_bash_timeout_is_bounded_by_the_job_deadline(root: Path) -> None:
    started = time.monotonic()
    out = call(context(root, seconds=0.5), "bash", command=f"sleep {HANG:.0f}")
    assert since(started) < NOT_HELD_UP
    assert out.startswith("timed out after 0.")
    assert out.endswith(
        " s (the command and its children were killed); "
        "the job's time limit is nearly reached\n(no output)"
    )
    assert fails(context(root, seconds=-1), "bash", command="true") == (
        "the job's time limit has been reached; no time left to run commands"
    )


def test_bash_output_keeps_the_tail(root: Path) -> None:
    out = call(context(root), "bash", command="seq 1 100000")
    total = len("".join(f"{i}\n" for i in range(1, 100001)))
    kept = "".join(f"{i}\n" for i in range(98001, 100001))
    assert out == f"exit code 0\n[... {total - len(kept)} bytes cut ...]\n" + kept.rstrip("\n")


def test_bash_output_is_cut_by_bytes_too(root: Path) -> None:
    out = call(context(root), "bash", command="head -c 100000 /dev/zero | tr '\\0' x")
    assert out == "exit code 0\n[... 70000 bytes cut ...]\n" + "x" * 30_000


def test_bash_goes_through_the_sandbox(root: Path) -> None:
    class Labelled:
        name = "test"

        @contextlib.contextmanager
        def wrap(self, command: Command, *, cwd: Path, seconds: float) -> Iterator[Command]:
            env = {**command.env, "SANDBOX": f"{cwd} {seconds:.0f}"}
            yield Command(("env", *command.argv), env)

    policy = Policy(root)
    ctx = ToolContext(root, policy, scrubbed_env(), time.monotonic() + 30, True, Labelled())
    assert call(ctx, "bash", command="echo $SANDBOX", timeout=7) == f"exit code 0\n{root} 7"


def test_unsandboxed_commands_are_recorded(root: Path) -> None:
    events: list[tuple[str, dict[str, object]]] = []
    ctx = ToolContext(
        root,
        Policy(root),
        scrubbed_env(),
        time.monotonic() + 30,
        True,
        on_event=lambda kind, **fields: events.append((kind, fields)),
    )
    assert call(ctx, "bash", command="echo hi") == "exit code 0\nhi"
    assert events == [("unsandboxed", {"command": "echo hi"})]

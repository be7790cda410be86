from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from claw_batch.errors import ToolError
from claw_batch.safety.paths import Policy

PROTECTED = (".git", ".claw", "workspace/memory")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project next to a sibling whose name starts the same, and a plain outside dir."""
    proj = tmp_path / "proj"
    for rel in ("notes/a.md", ".git/config", ".claw/state.db", "workspace/memory/2024-01-01.md"):
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text("x\n")
    (tmp_path / "proj-evil").mkdir()
    (tmp_path / "proj-evil" / "secret.txt").write_text("secret\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return proj.resolve()


def writer(root: Path, *globs: str, outputs: tuple[str, ...] = ()) -> Policy:
    return Policy(root, write_globs=globs, outputs=outputs, protected=PROTECTED)


def refused(call: Callable[[str], Path], path: str) -> str:
    with pytest.raises(ToolError) as e:
        call(path)
    return str(e.value)


def test_relative_and_absolute_paths_inside_are_resolved(root: Path) -> None:
    policy = Policy(root)
    assert policy.resolve_read("notes/a.md") == root / "notes" / "a.md"
    assert policy.resolve_read("./notes/../notes/a.md") == root / "notes" / "a.md"
    assert policy.resolve_read(str(root / "notes" / "a.md")) == root / "notes" / "a.md"
    assert policy.resolve_read(".") == root
    assert policy.relative(root / "notes" / "a.md") == "notes/a.md"
    assert policy.relative(root) == "."


def test_root_is_resolved(root: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(root)
    policy = Policy(tmp_path / "alias")
    assert policy.root == root
    assert policy.resolve_read("notes/a.md") == root / "notes" / "a.md"


def test_absolute_path_outside_is_refused(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    assert refused(Policy(root).resolve_read, str(secret)) == (
        f"refused reading {secret}: it resolves to {secret}, outside the project root {root}; "
        "use paths inside the project"
    )


def test_sibling_with_the_same_prefix_is_outside(root: Path, tmp_path: Path) -> None:
    evil = tmp_path / "proj-evil" / "secret.txt"
    assert refused(Policy(root).resolve_read, "../proj-evil/secret.txt") == (
        f"refused reading ../proj-evil/secret.txt: it resolves to {evil}, outside the project "
        f"root {root}; use paths inside the project"
    )
    assert refused(writer(root, "**").resolve_write, str(evil)).startswith(
        f"refused writing {evil}: it resolves to {evil}, outside the project root"
    )


def test_symlink_to_a_file_outside_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "notes" / "link.md").symlink_to(tmp_path / "outside" / "secret.txt")
    assert refused(Policy(root).resolve_read, "notes/link.md").startswith(
        f"refused reading notes/link.md: it resolves to {tmp_path}/outside/secret.txt, outside"
    )
    assert refused(writer(root, "**").resolve_write, "notes/link.md").startswith(
        "refused writing notes/link.md: it resolves to"
    )


def test_dangling_symlink_to_outside_is_refused_for_writes(root: Path, tmp_path: Path) -> None:
    (root / "notes" / "new.md").symlink_to(tmp_path / "outside" / "new.md")
    assert refused(writer(root, "**").resolve_write, "notes/new.md").startswith(
        "refused writing notes/new.md: it resolves to"
    )


def test_symlinked_parent_dir_to_outside_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "ext").symlink_to(tmp_path / "outside", target_is_directory=True)
    assert refused(Policy(root).resolve_read, "ext/secret.txt").startswith(
        "refused reading ext/secret.txt: it resolves to"
    )
    assert refused(writer(root, "**").resolve_write, "ext/new/deep.md").startswith(
        "refused writing ext/new/deep.md: it resolves to"
    )


def test_symlink_inside_is_checked_at_its_target(root: Path) -> None:
    (root / "reports").mkdir()
    (root / "reports" / "link").symlink_to(root / "notes", target_is_directory=True)
    policy = writer(root, "reports/**")
    assert refused(policy.resolve_write, "reports/link/a.md") == (
        "refused: writing reports/link/a.md (resolves to notes/a.md) is not permitted; "
        "this task may write only: reports/**"
    )


def test_runner_state_is_not_readable(root: Path) -> None:
    policy = Policy(root)
    assert refused(policy.resolve_read, ".claw/state.db") == (
        "refused: .claw/state.db is runner state (.claw/), which tools may not read"
    )
    assert refused(policy.resolve_read, ".claw").startswith("refused: .claw is runner state")
    assert policy.resolve_read(".git/config") == root / ".git" / "config"
    assert policy.resolve_read(".clawfile") == root / ".clawfile"  # only the dir itself


def test_writes_are_confined_to_globs_and_outputs(root: Path) -> None:
    policy = writer(root, "reports/**", "*.txt", outputs=("out/result.json",))
    assert policy.resolve_write("reports/2024/a.md") == root / "reports" / "2024" / "a.md"
    assert policy.resolve_write("x.txt") == root / "x.txt"
    assert policy.resolve_write("./out/result.json") == root / "out" / "result.json"
    assert refused(policy.resolve_write, "notes/a.md") == (
        "refused: writing notes/a.md is not permitted; this task may write only: "
        "reports/**, *.txt, out/result.json"
    )
    assert refused(policy.resolve_write, "d/x.txt").startswith("refused: writing d/x.txt is not")
    assert refused(Policy(root).resolve_write, "a.md") == (
        "refused: writing a.md is not permitted; this task may not write files"
    )


@pytest.mark.parametrize(
    ("path", "under"),
    [
        (".git/config", ".git"),
        (".git", ".git"),
        (".claw/state.db", ".claw"),
        ("workspace/memory/2024-01-01.md", "workspace/memory"),
        ("workspace/memory/new.md", "workspace/memory"),
    ],
)
def test_protected_dirs_are_never_writable(root: Path, path: str, under: str) -> None:
    policy = writer(root, "**", outputs=(path,))
    assert refused(policy.resolve_write, path) == (
        f"refused: tools may never write {path}"
        if path == under
        else f"refused: {path} is under {under}/, which tools may never write"
    )


def test_protected_dir_reached_through_a_symlink(root: Path) -> None:
    (root / "diary").symlink_to(root / "workspace" / "memory", target_is_directory=True)
    assert refused(writer(root, "**").resolve_write, "diary/x.md") == (
        "refused: diary/x.md (resolves to workspace/memory/x.md) is under workspace/memory/, "
        "which tools may never write"
    )


def test_writable_neighbours_of_protected_dirs(root: Path) -> None:
    policy = writer(root, "**")
    assert policy.resolve_write("workspace/memory.md") == root / "workspace" / "memory.md"
    assert policy.resolve_write(".github/ci.yml") == root / ".github" / "ci.yml"


def test_nonsense_paths(root: Path) -> None:
    assert refused(Policy(root).resolve_read, "") == (
        "invalid path '': give a path relative to the project root"
    )
    assert refused(writer(root, "**").resolve_write, ".") == (
        "refused: . is the project root, not a file"
    )
    assert "\0" not in os.fspath(root)
    assert refused(Policy(root).resolve_read, "a\0b").startswith("invalid path 'a\\x00b'")


@pytest.mark.parametrize(
    "path",
    [
        ".",
        "notes/a.md",
        "./notes//a.md/",
        "notes/missing/deeper.md",
        "notes/a.md/under-a-file",
        "inlink/a.md",
        "inlink/../notes/a.md",
        "notes/../../proj-evil/secret.txt",
        "out/secret.txt",
        "/etc/hostname",
    ],
)
def test_paths_resolve_as_realpath_does(root: Path, tmp_path: Path, path: str) -> None:
    """paths._realpath skips the lstat of the root's parents; what it returns must not differ."""
    from claw_batch.safety.paths import _realpath

    (root / "inlink").symlink_to(root / "notes")
    (root / "out").symlink_to(tmp_path / "outside")
    assert _realpath(str(root), path) == os.path.realpath(os.path.join(root, path))


def test_kernel_files_are_refused_even_with_the_root_at_slash() -> None:
    """/proc/self/environ holds the runner's keys: a project at / does not make it readable
    (a project under /dev/shm still reads its own files)."""
    policy = Policy(Path("/"))
    assert refused(policy.resolve_read, "proc/self/environ") == (
        f"refused reading proc/self/environ: it resolves to /proc/{os.getpid()}/environ, in "
        "/proc, which tools never read or write (the kernel's and processes' own files); "
        "use paths inside the project"
    )
    assert refused(policy.resolve_read, "/sys/kernel").startswith(
        "refused reading /sys/kernel: it resolves to /sys/kernel, in /sys, which tools never"
    )
    assert policy.resolve_read("etc/hostname") == Path("/etc/hostname")
    shm = Path("/dev/shm")
    if shm.is_dir():
        assert Policy(shm).resolve_read("x.txt") == shm / "x.txt"


def test_a_kernel_filesystem_itself_is_refused_and_a_sibling_named_like_one_is_not() -> None:
    policy = Policy(Path("/"))
    assert refused(policy.resolve_read, "/dev").startswith(
        "refused reading /dev: it resolves to /dev, in /dev, which tools never"
    )
    assert refused(policy.resolve_read, "proc").startswith(
        "refused reading proc: it resolves to /proc, in /proc, which tools never"
    )
    assert policy.resolve_read("/procfiles/x") == Path("/procfiles/x")  # not under /proc

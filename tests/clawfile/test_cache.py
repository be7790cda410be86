"""The validated clawfile is cached in .claw/clawfile.json; what validation read decides
whether the cache still holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_project

from claw_batch.clawfile.cache import CACHE
from claw_batch.clawfile.load import load_project
from claw_batch.errors import ClawfileError

CLAWFILE = """\
tasks:
  t:
    prompt: prompts/t.md
    foreach: "inbox/*.txt"
    output: "out/{{ item.stem }}.md"
    skills: [tidy]
"""
FILES = {
    "prompts/t.md": "Summarise {{ item.path }}.\n",
    "skills/tidy/SKILL.md": "---\nname: tidy\ndescription: Tidy things.\n---\nBody.\n",
}


def project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    (root / ".claw").mkdir()
    return root


def test_a_run_writes_the_cache_and_the_next_load_reads_it(tmp_path: Path) -> None:
    root = project(tmp_path)
    written = load_project(root, None, cache="write")
    assert (root / CACHE).is_file()
    cached = load_project(root, None, cache="read")
    assert cached == written
    task = cached.config.tasks["t"]
    assert task.variables == frozenset({"item"})
    assert task.definition == written.config.tasks["t"].definition


def test_a_cached_load_imports_no_validator(tmp_path: Path) -> None:
    root = project(tmp_path)
    load_project(root, None, cache="write")
    code = (
        "import sys; from pathlib import Path; from claw_batch.clawfile.load import load_project; "
        f"load_project(Path({str(root)!r}), None); "
        "print(sorted(m for m in ('pydantic', 'yaml', 'jinja2') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda root: (root / "clawfile.yaml").write_text(CLAWFILE + "    max_steps: 0\n"),
            "max_steps",
        ),
        (
            lambda root: (root / "prompts/t.md").write_text("Hi {{ nope }}\n"),
            "undefined template variable 'nope'",
        ),
        (
            lambda root: (root / "skills/tidy/SKILL.md").rename(root / "skills/tidy/x.md"),
            "unknown skill 'tidy'",
        ),
    ],
    ids=["clawfile", "prompt-file", "skill-removed"],
)
def test_a_change_to_what_validation_read_validates_again(
    tmp_path: Path, change: object, message: str
) -> None:
    root = project(tmp_path)
    load_project(root, None, cache="write")
    change(root)  # type: ignore[operator]
    with pytest.raises(ClawfileError, match=message):
        load_project(root, None, cache="read")


def test_a_corrupt_or_foreign_cache_is_ignored(tmp_path: Path) -> None:
    root = project(tmp_path)
    expected = load_project(root, None, cache="write")
    for junk in ("{not json", "[]", '{"format": 2}', '{"format": 99, "claw": "0"}'):
        (root / CACHE).write_text(junk)
        assert load_project(root, None, cache="read") == expected


def test_only_a_run_writes_it_and_never_creates_dot_claw(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, FILES)
    load_project(root, None, cache="write")
    assert not (root / ".claw").exists()
    (root / ".claw").mkdir()
    load_project(root, None, cache="read")
    assert not (root / CACHE).exists()


def test_validate_ignores_the_cache(tmp_path: Path) -> None:
    root = project(tmp_path)
    load_project(root, None, cache="write")
    text = (root / CACHE).read_text()
    assert text.count('"max_steps": 30') == 2  # defaults and the task
    (root / CACHE).write_text(text.replace('"max_steps": 30', '"max_steps": 7'))
    assert load_project(root, None, cache="read").config.tasks["t"].max_steps == 7
    assert load_project(root, None, cache="off").config.tasks["t"].max_steps == 30

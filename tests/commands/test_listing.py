"""`claw list` end to end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

NOW = "2026-11-22T23:05:00+01:00"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def test_list_keeps_the_clawfile_order_after_a_run(tmp_path: Path, server: FakeOpenAI) -> None:
    # A run caches the validated clawfile; listing from that cache once showed the tasks
    # sorted by name instead of in the order the user wrote them.
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        tasks:
          zeta:
            description: Last by name, first in the file
            prompt: "z"
          alpha:
            description: First by name, second in the file
            prompt: "a"
        """,
    )
    expected = (
        "zeta   never ran      Last by name, first in the file\n"
        "alpha  never ran      First by name, second in the file\n"
    )
    assert claw(root, "list").stdout == expected
    server.enqueue(text("done z"), text("done a"))
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-0123", "CLAW_NOW": NOW}
    assert claw(root, "run", env=env).exit_code == 0
    assert claw(root, "run", env=env).exit_code == 0  # the first run made .claw/ for the cache
    assert claw(root, "list", env={"CLAW_NOW": NOW}).stdout == (
        "zeta   up to date     Last by name, first in the file\n"
        "alpha  up to date     First by name, second in the file\n"
    )


def test_a_task_that_failed_last_is_failed_not_never_ran(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """`claw why` says how it last ended, and `claw list` shows `failed`; `never ran` is
    for a task the ledger has no run of."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        tasks:
          summary:
            description: Summarise
            prompt: "s"
          other:
            description: Never asked for
            prompt: "o"
        """,
    )
    server.enqueue(text(""))  # an empty final answer fails the job
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-0123", "CLAW_NOW": NOW}
    assert claw(root, "run", "summary", env=env).exit_code == 1
    run_id = claw(root, "log", "--json").stdout.split('"id": "')[1].split('"')[0]
    why = claw(root, "why", "summary")
    assert why.stdout.startswith(
        f"summary: would run\n  - failed in run {run_id} at 2026-11-22 23:05: "
    ), why.stdout
    assert claw(root, "list").stdout == (
        "summary  failed         Summarise\nother    never ran      Never asked for\n"
    )


CHANGING = """
version: 1
model: fake-model
tasks:
  t:
    description: Tidies the notes
    prompt: prompts/t.md
    output: out/t.md
    skills: [tidy]
"""
CHANGING_FILES = {
    "prompts/t.md": 'Tidy. {% include "prompts/part.md" %}\n',
    "prompts/part.md": "Be brief.\n",
    "skills/tidy/SKILL.md": "---\nname: tidy\ndescription: Tidy things.\n---\nBody.\n",
}


def edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    path.write_text(path.read_text().replace(old, new))


@pytest.mark.parametrize(
    ("change", "listed", "planned"),
    [
        (
            lambda root: edit(root, "clawfile.yaml", "Tidies the notes", "Tidies the desk"),
            "t  up to date     Tidies the desk\n",
            "up to date  t\n",
        ),
        (
            lambda root: edit(root, "clawfile.yaml", "out/t.md", "out/u.md"),
            "t  to run         Tidies the notes\n",
            "task definition changed\n",
        ),
        (
            lambda root: edit(root, "prompts/t.md", "Tidy.", "Tidy up."),
            "t  to run         Tidies the notes\n",
            "prompt changed\n",
        ),
        (
            lambda root: edit(root, "prompts/part.md", "brief", "short"),
            "t  to run         Tidies the notes\n",
            "prompt changed\n",
        ),
        (
            lambda root: edit(root, "skills/tidy/SKILL.md", "Tidy things.", "Tidy the desk."),
            "t  to run         Tidies the notes\n",
            "skills changed: tidy edited\n",
        ),
    ],
    ids=["description", "clawfile", "prompt", "include", "skill"],
)
def test_list_and_plan_see_a_change_through_their_cache(
    tmp_path: Path, server: FakeOpenAI, change: object, listed: str, planned: str
) -> None:
    # claw list and claw plan keep the validated clawfile and the parsed skills in .claw/:
    # what they read from there must not hide a change to what it was made from.
    root = make_project(tmp_path / "p", CHANGING, CHANGING_FILES)
    server.enqueue(text("tidied"))
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-0123", "CLAW_NOW": NOW}
    assert claw(root, "run", env=env).exit_code == 0
    for _ in range(2):  # the second one reads what the first one kept
        assert claw(root, "list", env={"CLAW_NOW": NOW}).stdout == (
            "t  up to date     Tidies the notes\n"
        )
        assert claw(root, "plan", env={"CLAW_NOW": NOW}).stdout.startswith("up to date  t")
    assert (root / ".claw" / "clawfile.json").is_file()
    change(root)  # type: ignore[operator]
    assert claw(root, "list", "-q", env={"CLAW_NOW": NOW}).stdout == listed
    assert claw(root, "plan", env={"CLAW_NOW": NOW}).stdout.endswith(planned)


def test_list_makes_dot_claw_for_its_cache_plan_does_not(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CHANGING, CHANGING_FILES)
    assert claw(root, "plan").exit_code == 0
    assert not (root / ".claw").exists()
    assert claw(root, "list").stdout == "t  never ran      Tidies the notes\n"
    assert sorted(p.name for p in (root / ".claw").iterdir()) == ["clawfile.json", "skills.json"]


def test_list_and_plan_write_nothing_through_a_dot_claw_link(tmp_path: Path) -> None:
    # `claw list` and `claw plan` are how one looks at a cloned project: a `.claw` link it
    # came with does not make them write where the link points.
    root = make_project(tmp_path / "p", CHANGING, CHANGING_FILES)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".claw").symlink_to(elsewhere)
    assert claw(root, "list").stdout == "t  never ran      Tidies the notes\n"
    assert claw(root, "plan").exit_code == 0
    assert list(elsewhere.iterdir()) == []

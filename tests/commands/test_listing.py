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

"""The daily note a run appends, end to end."""

from __future__ import annotations

import re
from pathlib import Path

from fake_openai import FakeOpenAI, text
from helpers import claw, make_project


def test_the_note_counts_one_job_and_one_token_in_the_singular(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        tasks:
          each:
            prompt: "Read {{ item.path }}."
            foreach: "inbox/*.txt"
        """,
        {"inbox/a.txt": "one file\n"},
    )
    with FakeOpenAI() as server:
        server.enqueue(text("read it", usage=(1, 0)))
        env = {
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-test-0123",
            "CLAW_NOW": "2026-11-22T23:05:00+01:00",
        }
        assert claw(root, "run", env=env).exit_code == 0
    note = (root / "workspace/memory/2026-11-22.md").read_text()
    entry = re.sub(r"\d+\.\d s", "N s", note[note.index("### 23:05 each") :])
    assert entry == "### 23:05 each · 1 job: 1 ok · N s · 1 token\n> inbox/a.txt: read it\n\n"

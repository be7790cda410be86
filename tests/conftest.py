from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/fake_openai.py, tests/helpers.py


@pytest.fixture(autouse=True)
def clean_environment(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Tests never see the developer's keys, home or config, nor a pinned clock."""
    home = tmp_path_factory.mktemp("home")
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "CLAW_")) or name.endswith("_API_KEY"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("NO_COLOR", "1")
    yield

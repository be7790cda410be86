"""The example project's MCP server (servers/glossary.py): it answers offline, through the
hub a run uses, and the example's clawfile validates clean with its entry commented out (as
shipped) and uncommented and used by a task (as the README shows it)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import claw

from claw_batch.config import McpServer
from claw_batch.mcp.hub import Hub

REPO = Path(__file__).resolve().parent.parent.parent


def example(target: Path) -> Path:
    target.mkdir()
    for name in ("clawfile.yaml", "prompts", "skills", "workspace", "servers"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target / name)
    return target


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    root = example(tmp_path / "example")
    command = (sys.executable, "servers/glossary.py", "servers/glossary.md")
    servers = {"glossary": McpServer(command=command, read_only=True)}
    started = Hub(root, servers, dict(os.environ))
    try:
        yield started
    finally:
        started.close()


def test_the_glossary_server_lists_its_tools(hub: Hub) -> None:
    tools = {t.name: t for t in hub.tools("glossary")}
    assert sorted(tools) == ["lookup", "terms"]
    assert tools["lookup"].schema["required"] == ["term"]


def test_the_glossary_server_looks_a_term_up(hub: Hub) -> None:
    reply = hub.call("glossary", "lookup", {"term": "Freeze"}, timeout=60)
    assert (reply.text, reply.is_error) == (
        "No merges to main from Wednesday 18:00 until Thursday's release ships.",
        False,
    )
    missing = hub.call("glossary", "lookup", {"term": "sprint"}, timeout=60)
    assert missing.text.startswith("'sprint' is not in the glossary (it has: freeze, inv-, ")


def test_the_example_validates_clean_with_the_server_in_use(tmp_path: Path) -> None:
    root = example(tmp_path / "example")
    text = (root / "clawfile.yaml").read_text()
    assert "\nmcp_servers:\n  glossary:\n" in text and "mcp.glossary.lookup]" in text
    r = claw(root, "validate", "-q")
    assert (r.exit_code, r.stderr) == (0, "")

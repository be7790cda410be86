"""Golden: the text of `claw mcp list`, servers that work and servers that fail
(tests/mcp/servers), as the user sees it on stdout and stderr."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from syrupy.assertion import SnapshotAssertion

from claw_batch.cli import main
from claw_batch.sandbox import bubblewrap

SERVERS = Path(__file__).parent.parent / "mcp" / "servers"
UNAVAILABLE = bubblewrap.unavailable(os.geteuid() == 0)
CLAWFILE = """
model: gpt-4o-mini
mcp_servers:
  tools: {command: [python, servers/tools.py]}
  silent: {command: [python, servers/silent.py], startup_timeout: 1}
  bare: {command: [python, servers/tools.py], sandbox: none}
tasks:
  triage:
    prompt: "Triage."
    tools: [read, mcp.tools.echo, mcp.tools.git_lgo, mcp.bare.*]
"""


@pytest.mark.skipif(bool(UNAVAILABLE) and not os.environ.get("CI"), reason="no sandbox here")
def test_mcp_list_text(tmp_path: Path, snapshot: SnapshotAssertion) -> None:
    root = tmp_path / "project"
    shutil.copytree(SERVERS, root / "servers", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "clawfile.yaml").write_text(textwrap.dedent(CLAWFILE).lstrip())
    r = CliRunner().invoke(main, ["mcp", "list", "-C", str(root)], catch_exceptions=False)
    assert {"exit_code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr} == snapshot

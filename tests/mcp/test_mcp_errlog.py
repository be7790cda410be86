"""A server's stderr: kept in .claw/mcp/SERVER.log, bounded, its tail in failure messages,
never on claw's terminal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import make_project
from mcphelpers import NO_SANDBOX, SERVERS

from claw_batch.cli import main
from claw_batch.mcp.errlog import TAIL_LINES, ErrLog


def test_the_log_keeps_its_newest_lines_when_full_and_the_tail_its_last_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".claw" / "mcp" / "s.log"
    log = ErrLog(path, ".claw/mcp/s.log", max_bytes=1000)
    for i in range(200):
        log.write(f"line {i:03}\n".encode())
    assert path.stat().st_size <= 1000
    assert path.read_text().endswith("line 199\n")
    assert log.tail().splitlines() == [f"line {i:03}" for i in range(200 - TAIL_LINES, 200)]


def test_a_log_that_cannot_be_written_does_not_stop_the_server(tmp_path: Path) -> None:
    (tmp_path / ".claw").write_text("a file, not a folder\n")
    log = ErrLog(tmp_path / ".claw" / "mcp" / "s.log")
    log.write(b"still kept in memory\n")
    assert log.path is None and log.tail() == "still kept in memory"


@pytest.mark.skipif(bool(NO_SANDBOX) and not os.environ.get("CI"), reason="no sandbox here")
def test_a_servers_stderr_goes_to_its_log_not_to_claws_terminal(tmp_path: Path) -> None:
    clawfile = """
    model: gpt-4o-mini
    mcp_servers:
      silent: {command: [python, servers/silent.py], startup_timeout: 1}
    tasks:
      t: {prompt: hi}
    """
    root = make_project(
        tmp_path / "p", clawfile, {"servers/silent.py": (SERVERS / "silent.py").read_text()}
    )
    r = CliRunner().invoke(main, ["mcp", "list", "-C", str(root)], catch_exceptions=False)
    assert r.exit_code == 1
    said = [line for line in r.stderr.splitlines() if "saying nothing" in line]
    assert said == ["claw: silent: up, and saying nothing"]  # only inside claw's own message
    assert "silent: up, and saying nothing" in (root / ".claw/mcp/silent.log").read_text()

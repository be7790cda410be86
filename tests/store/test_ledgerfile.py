"""The ledger's page check at opening (claw_batch.store.ledgerfile): a ledger closed cleanly
after a check, and not changed since, is not checked again; anything else is."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from pathlib import Path

import fake_openai
import pytest
from fake_openai import FakeOpenAI, call, tool_calls
from helpers import claw_process, make_project

from claw_batch.store import ledgerfile
from claw_batch.store.ledgerfile import BULK, pages_to_check
from claw_batch.store.state import Done, JobRecord, State

RUN = "20261127-000000-abcdef"


def closed_ledger(tmp_path: Path) -> Path:
    """A ledger with a run and a job's success, closed as a run closes it."""
    db = tmp_path / ".claw/state.db"
    state = State(db)
    state.begin_run(RUN, "2026-11-27T00:00:00", "claw run")
    state.start_job(RUN, "t", "a", "2026-11-27T00:00:00")
    record = JobRecord(RUN, "t", "a", "ok", None, "", 1.0, 0, 0, 0, None, None, None, None)
    state.succeed_job(record, Done.of("t", "a", "fp", {}, {}, "text"))
    state.close()
    return db


def rewrite_a_page(db: Path) -> None:
    """A page written over with what it held: same size, same inode, same content."""
    with open(db, "r+b") as f:
        f.seek(4096)
        page = f.read(4096)
        f.seek(4096)
        f.write(page)


def test_a_ledger_closed_cleanly_is_not_checked_again(tmp_path: Path) -> None:
    db = closed_ledger(tmp_path)
    assert pages_to_check(db) is None
    state = State(db)  # the opening that trusted it closes it cleanly too
    state.close()
    assert pages_to_check(db) is None


def test_a_new_ledger_is_checked(tmp_path: Path) -> None:
    db = tmp_path / ".claw/state.db"
    db.parent.mkdir()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE done (task, item)")
    assert pages_to_check(db) == BULK


def test_a_ledger_written_after_its_clean_close_is_checked(tmp_path: Path) -> None:
    """At once, in the same clock tick as the close if it can be: same size, same inode."""
    db = closed_ledger(tmp_path)
    rewrite_a_page(db)
    assert pages_to_check(db) == BULK


def test_a_ledger_written_with_its_mtime_put_back_is_checked(tmp_path: Path) -> None:
    """As `cp -p`, rsync or `touch -r` would leave it: the inode's change time still moved."""
    db = closed_ledger(tmp_path)
    before = db.stat()
    rewrite_a_page(db)
    os.utime(db, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert db.stat().st_mtime_ns == before.st_mtime_ns
    assert pages_to_check(db) == BULK


def test_another_file_in_the_ledgers_place_is_checked(tmp_path: Path) -> None:
    """A copy (a backup put back, a file from another project) is not the file checked."""
    db = closed_ledger(tmp_path)
    copy = db.with_name("copy.db")
    copy.write_bytes(db.read_bytes())
    os.replace(copy, db)
    assert pages_to_check(db) == BULK


def test_a_ledger_with_a_write_ahead_log_is_checked(tmp_path: Path) -> None:
    """A run killed (kill -9, a power cut) leaves its WAL: it was never closed cleanly."""
    db = closed_ledger(tmp_path)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("UPDATE runs SET status = 'running'")
        assert db.with_name("state.db-wal").exists()
        assert pages_to_check(db) == BULK
    finally:
        conn.close()


def test_a_stamp_not_later_than_the_ledgers_last_change_is_not_trusted(tmp_path: Path) -> None:
    """A write in the same clock tick as the ledger's last change would leave its stat keys
    as they were (a file system's timestamps are as coarse as the kernel's clock): the stamp
    is trusted only when it was written in a later tick."""
    db = closed_ledger(tmp_path)
    stamp = db.with_name("state.db.checked")
    changed = db.stat().st_ctime_ns
    os.utime(stamp, ns=(changed, changed))
    assert pages_to_check(db) == BULK


def test_a_damaged_stamp_is_not_trusted(tmp_path: Path) -> None:
    db = closed_ledger(tmp_path)
    stamp = db.with_name("state.db.checked")
    for text in (stamp.read_bytes()[:-1], b"", stamp.read_bytes().replace(b" ", b"  ", 1)):
        stamp.write_bytes(text)
        assert pages_to_check(db) == BULK


def test_a_ledger_with_damage_found_is_checked_whole_and_not_stamped(tmp_path: Path) -> None:
    db = closed_ledger(tmp_path)
    state = State(db)
    ledgerfile.suspect(db)  # what a read that met damage does
    state.close()
    assert pages_to_check(db) == ()
    assert not db.with_name("state.db.checked").exists()


def test_a_ledger_read_only_is_not_stamped(tmp_path: Path) -> None:
    db = closed_ledger(tmp_path)
    stamp = db.with_name("state.db.checked")
    stamp.unlink()
    State(db, readonly=True).close()
    assert not stamp.exists()
    assert pages_to_check(db) == BULK


UNSANDBOXED = """
version: 1
model: fake-model
tasks:
  look:
    prompt: "Look around with bash."
    output: out/look.md
    tools: [bash]
    permissions: {bash: true}
    sandbox: none
"""


@pytest.mark.parametrize("sandbox", ["none", "bubblewrap"])
def test_a_run_that_ran_a_command_unsandboxed_leaves_no_stamp(tmp_path: Path, sandbox: str) -> None:
    """An unsandboxed command may write .claw/ (damage the ledger) between the check at opening
    and the clean close: that close must not vouch for the pages, so the next run checks them."""
    if sandbox == "bubblewrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    root = make_project(tmp_path / "p", UNSANDBOXED.replace("sandbox: none", f"sandbox: {sandbox}"))
    with FakeOpenAI() as server:
        server.enqueue(tool_calls(call("bash", {"command": "true"})))
        server.enqueue(fake_openai.text("looked"))
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-0123"}
        done = claw_process(root, "run", "-q", env=env)
    assert done.returncode == 0, done.stderr
    stamped = (root / ".claw/state.db.checked").exists()
    assert stamped == (sandbox == "bubblewrap")
    if not stamped:
        assert pages_to_check(root / ".claw/state.db") == BULK

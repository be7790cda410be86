"""Atomic writes: the directory's fsync, made at once or left to a DirSyncs."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from claw_batch.safety import atomic
from claw_batch.safety.atomic import DirSyncs, write_atomic_in


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each os.fsync synced (a directory's path, or a file's name), in order."""
    synced: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        real(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(atomic.os, "fsync", recording)
    return synced


def test_a_write_fsyncs_its_file_and_then_its_folder(tmp_path: Path, fsynced: list[str]) -> None:
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic_in(folder, "a.md", "a")
    finally:
        os.close(folder)
    assert len(fsynced) == 2 and fsynced[1] == str(tmp_path)
    assert (tmp_path / "a.md").read_text() == "a"


def test_writes_into_one_folder_share_its_fsync(tmp_path: Path, fsynced: list[str]) -> None:
    """Outputs of jobs that end together: the folder is fsynced once, when asked, and
    forgotten after (its fd closed)."""
    (tmp_path / "other").mkdir()
    synced = DirSyncs()
    for folder_path, name in ((tmp_path, "a.md"), (tmp_path, "b.md"), (tmp_path / "other", "c")):
        folder = os.open(folder_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            write_atomic_in(folder, name, name, synced=synced)
        finally:
            os.close(folder)  # the caller's fd: DirSyncs keeps its own
    assert str(tmp_path) not in fsynced  # three files fsynced before their renames, no folder
    assert len(fsynced) == 3
    fds = len(os.listdir("/proc/self/fd"))
    synced.sync()
    assert sorted(fsynced[3:]) == sorted([str(tmp_path), str(tmp_path / "other")])
    assert len(os.listdir("/proc/self/fd")) == fds - 2
    synced.sync()  # nothing left to sync
    assert len(fsynced) == 5
    assert sorted(os.listdir(tmp_path)) == ["a.md", "b.md", "other"]


def test_a_folder_that_cannot_be_kept_is_fsynced_at_once(
    tmp_path: Path, fsynced: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fd left to keep the folder open until the sync (EMFILE): its rename is made
    durable at once, as without a DirSyncs, and the write succeeds."""

    def no_fd_left(fd: int) -> int:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(atomic.os, "dup", no_fd_left)
    synced = DirSyncs()
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic_in(folder, "a.md", "a", synced=synced)
    finally:
        os.close(folder)
    assert len(fsynced) == 2 and fsynced[1] == str(tmp_path)
    synced.sync()
    assert len(fsynced) == 2
    assert (tmp_path / "a.md").read_text() == "a"

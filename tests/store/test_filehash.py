"""File hashes read through the descriptor, and outputs hashed from the bytes written."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from claw_batch.store import filehash
from claw_batch.store.filehash import CHUNK, SPECIAL, FileHashes, entries, sha256_file
from claw_batch.store.state import State


@pytest.mark.parametrize("size", [0, 1, 4096, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 7])
def test_sha256_file_with_and_without_the_size(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    data = os.urandom(size)
    path.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    assert sha256_file(path) == want
    assert sha256_file(str(path), size) == want


@pytest.mark.parametrize("stale", [0, 10, 200])
def test_sha256_file_when_the_size_given_is_stale(tmp_path: Path, stale: int) -> None:
    """The file changed between the stat and the read: all of it is still read."""
    path = tmp_path / "f"
    data = b"x" * 100
    path.write_bytes(data)
    assert sha256_file(path, stale) == hashlib.sha256(data).hexdigest()


def test_an_output_hashed_from_its_bytes_is_known_by_its_stat_key(tmp_path: Path) -> None:
    state = State(tmp_path / "state.db")
    (tmp_path / "out.md").write_bytes(b"answer\n")
    hashes = FileHashes(state, tmp_path)
    digest = hashes.hash_written("out.md", b"answer\n")
    assert digest == hashlib.sha256(b"answer\n").hexdigest()
    hashes.save()
    st = os.stat(tmp_path / "out.md")
    key = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
    assert entries(state)["out.md"] == (*key, digest)
    state.close()


def test_an_output_replaced_by_other_bytes_is_read(tmp_path: Path) -> None:
    (tmp_path / "out.md").write_bytes(b"someone else's text\n")
    hashes = FileHashes(None, tmp_path)
    digest = hashes.hash_written("out.md", b"answer\n")
    assert digest == hashlib.sha256(b"someone else's text\n").hexdigest()
    assert hashes.hash_written("missing.md", b"answer\n") is None


def test_a_fifo_among_the_inputs_is_never_opened(tmp_path: Path) -> None:
    """A FIFO where an input or an output should be would block a hashing open forever."""
    os.mkfifo(tmp_path / "pipe.txt")
    assert FileHashes(None, tmp_path).hash("pipe.txt") == SPECIAL


def test_what_a_run_learns_is_written_in_batches_and_read_back(tmp_path: Path) -> None:
    """A run of 100,000 jobs does not hold its files' entries to its end: they go to the
    ledger a batch at a time, and the seal of a job finds its files' stat keys there."""
    state = State(tmp_path / "state.db")
    for n in range(5):
        (tmp_path / f"{n}.txt").write_text(f"file {n}\n")
    hashes = FileHashes(state, tmp_path, batch=2)
    digests = [hashes.hash(f"{n}.txt") for n in range(5)]
    assert sorted(entries(state)) == ["0.txt", "1.txt", "2.txt", "3.txt"]  # before save()
    assert hashes.hashed_stamp(["0.txt", "4.txt"]) == hashes.stamp(["0.txt", "4.txt"])
    hashes.save()
    assert [entries(state)[f"{n}.txt"][4] for n in range(5)] == digests
    (tmp_path / "0.txt").write_text("changed\n")  # written to the ledger: never stale
    assert hashes.hash("0.txt") == hashlib.sha256(b"changed\n").hexdigest()
    state.close()


def test_a_dry_run_writes_no_entry(tmp_path: Path) -> None:
    State(tmp_path / "state.db").close()
    state = State(tmp_path / "state.db", readonly=True)
    for n in range(3):
        (tmp_path / f"{n}.txt").write_text(f"file {n}\n")
    hashes = FileHashes(state, tmp_path, batch=1)
    assert [hashes.hash(f"{n}.txt") for n in range(3)] == [
        hashlib.sha256(f"file {n}\n".encode()).hexdigest() for n in range(3)
    ]
    assert hashes.hashed_stamp(["0.txt"]) == hashes.stamp(["0.txt"])
    assert entries(state) == {}
    state.close()


def test_a_large_file_hashed_and_written_in_a_batch_is_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its entry comes back from the ledger with every stat key (the ctime included), so the
    file is known without reading it (64 KB and more are read to be hashed)."""
    (tmp_path / ".claw").mkdir()
    state = State(tmp_path / ".claw" / "state.db")
    (tmp_path / "big.bin").write_bytes(b"x" * (1 << 17))
    for i in range(2):
        (tmp_path / f"f{i}").write_text(str(i))
    hashes = FileHashes(state, tmp_path, batch=2)
    first = hashes.hash("big.bin")
    hashes.hash("f0")
    hashes.hash("f1")  # the batch is full: written to the ledger, and forgotten here
    reads: list[object] = []
    real = filehash.sha256_file
    monkeypatch.setattr(filehash, "sha256_file", lambda *a: reads.append(a) or real(*a))
    assert hashes.hash("big.bin") == first
    state.close()
    assert reads == []


def test_the_stamp_of_a_pair_is_the_stamp_of_both(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in/a.txt").write_text("a")
    (tmp_path / "b.md").write_text("bb")
    hashes = FileHashes(None, tmp_path)
    assert hashes.stamp_pair("in/a.txt", "b.md") == hashes.stamp(["in/a.txt", "b.md"])
    assert hashes.stamp_pair("in/a.txt", "gone.md") is None
    assert hashes.stamp_pair("in/a.txt/x", "b.md") is None  # a file taken for a folder

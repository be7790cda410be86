"""claw's own temp files that a killed run left behind: the next run removes them, and
nothing else (issue 14).

A real `claw run` is stopped (SIGSTOP, through a pidfd) as inotify sees it create an output's
temp file; if the temp is still there, unrenamed, the run is killed with SIGKILL: a write cut
short, found rather than timed. Then, beside it, files that only look like claw's stale temps
— another pattern, a live writer's, one changed after the next run started, another user's,
a symlink, one in a folder claw does not write — and the next run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import claw, claw_process, make_project
from test_crash import IN_CREATE, Inotify

from claw_batch.safety.atomic import write_atomic

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")),
    reason="uses Linux pidfds and inotify",
)

ITEMS = ("a", "b", "c", "d")
CLAWFILE = """
    version: 1
    model: m
    tasks:
      big:
        foreach: "in/*.txt"
        prompt: "Write {{ item.stem }}"
        output: "out/{{ item.stem }}.md"
"""
ANSWER = "a line of the answer\n" * 100_000  # 2 MB: its write takes a while to cut short
ANY_TEMP = re.compile(r"\..+\.tmp")  # claw's temp files, in this pattern or the old one
STALE = time.time() - 3600  # an mtime well before any run of this test


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        srv.handler = lambda body: text(ANSWER)
        yield srv


def env_for(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}


class CutShort:
    """Stops the run at each temp file created in `folder`; kills it at the first one still
    there (unrenamed) when it is stopped, else lets it go on."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.inotify = Inotify([folder])
        self.left: str | None = None  # the temp file the kill left
        self.pidfd = -1
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def attach(self, pid: int) -> None:
        self.pidfd = os.pidfd_open(pid)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set() and self.left is None:
            for mask, name in self.inotify.read(timeout=0.05):
                if mask & IN_CREATE and ANY_TEMP.fullmatch(name) and self._cut(name):
                    return

    def _cut(self, name: str) -> bool:
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGSTOP)
        except ProcessLookupError:
            return True
        if (self.folder / name).exists():  # stopped mid-write: its rename has not happened
            self.left = name
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            return True
        signal.pidfd_send_signal(self.pidfd, signal.SIGCONT)
        return False

    def close(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        self.inotify.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)


def killed_mid_write(root: Path, server: FakeOpenAI) -> str:
    """Runs `claw run` in a process until one of its output writes is cut short by SIGKILL;
    returns the temp file it left."""
    cut = CutShort(root / "out")
    proc = subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "run", "-j", "1"],
        cwd=root,
        env={**os.environ, **env_for(server)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        cut.attach(proc.pid)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cut.close()
    assert cut.left is not None, f"no write was caught in progress\n{stderr.decode()}"
    assert proc.returncode == -signal.SIGKILL
    return f"out/{cut.left}"


def plant(root: Path, rel: str, *, mtime: float = STALE) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("half a file\n")
    os.utime(path, (mtime, mtime))
    return path


def test_the_next_run_removes_what_a_killed_write_left_and_nothing_else(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, {f"in/{i}.txt": i for i in ITEMS})
    (root / "out").mkdir()
    left = killed_mid_write(root, server)
    assert (root / left).exists()

    dead = dead_pid()
    live = subprocess.Popen(["sleep", "600"])  # a claw still writing, as far as a pid says
    outside = tmp_path / "outside.txt"
    outside.write_text("not claw's\n")
    stale = [  # claw's, its writer gone, in folders where runs write
        f"out/.z.md.claw-{dead}-0badc0de.tmp",
        f"workspace/.MEMORY.md.claw-{dead}-0badc0de.tmp",
        f".claw/.config.json.claw-{dead}-0badc0de.tmp",
    ]
    kept = [
        "out/.z.md.0badc0de.tmp",  # another program's pattern (and claw's before issue 14)
        "out/z.claw-1-0badc0de.tmp",  # not hidden: no temp of claw's
        f"out/.z.md.claw-{dead}-0badc0de.txt",
        f"out/.y.md.claw-{live.pid}-0badc0de.tmp",  # its writer lives
        f"docs/.z.md.claw-{dead}-0badc0de.tmp",  # a folder no run writes
    ]
    try:
        for rel in stale + kept:
            plant(root, rel)
        fresh = plant(root, f"out/.f.md.claw-{dead}-0badc0de.tmp", mtime=time.time() + 3600)
        link = root / f"out/.l.md.claw-{dead}-0badc0de.tmp"
        link.symlink_to(outside)
        if os.geteuid() == 0:  # another user's file, which claw (root) could remove
            other = plant(root, f"out/.o.md.claw-{dead}-0badc0de.tmp")
            os.chown(other, 65534, 65534)
            kept.append(str(other.relative_to(root)))

        r = claw(root, "run", "-j", "1", env=env_for(server))
        assert r.exit_code == 0, r.stderr
    finally:
        live.kill()
        live.wait()
    kept += [str(fresh.relative_to(root)), str(link.relative_to(root))]
    assert [rel for rel in kept if not os.path.lexists(root / rel)] == []
    temps = {p.relative_to(root).as_posix() for p in root.rglob("*") if ANY_TEMP.fullmatch(p.name)}
    assert temps <= set(kept)  # the killed write's and the stale ones are gone
    assert left not in temps and not set(stale) & temps
    assert all((root / f"out/{i}.md").read_text() == ANSWER for i in ITEMS)
    assert outside.read_text() == "not claw's\n"


def test_a_folder_is_swept_where_claw_writes_into_it(tmp_path: Path, server: FakeOpenAI) -> None:
    """Below a write directory, a folder is swept when claw next writes there (the write tool
    here, in a process of its own), and one it does not write into is left alone."""
    clawfile = """
        version: 1
        model: m
        tasks:
          notes:
            prompt: Write the note.
            tools: [write]
            permissions: {write: ["out/**"]}
    """
    root = make_project(tmp_path / "p", clawfile)
    dead = dead_pid()
    swept = plant(root, f"out/2026/11/.a.md.claw-{dead}-0badc0de.tmp")
    kept = plant(root, f"out/2025/.a.md.claw-{dead}-0badc0de.tmp")
    server.handler = None
    server.enqueue(
        tool_calls(call("write", {"path": "out/2026/11/a.md", "content": "note\n"})),
        text("done"),
    )
    r = claw_process(root, "run", env=env_for(server))
    assert r.returncode == 0, r.stderr
    assert (root / "out/2026/11/a.md").read_text() == "note\n"
    assert not swept.exists() and kept.exists()


def test_a_name_as_long_as_the_filesystem_allows_can_be_written(tmp_path: Path) -> None:
    """The temp file's name holds the start of the target's: not the whole, which with the
    marker would pass NAME_MAX."""
    name = "é" * 127 + "x"  # 255 bytes
    write_atomic(tmp_path / name, "x")
    assert os.listdir(tmp_path) == [name]

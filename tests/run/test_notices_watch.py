"""A run `claw watch` starts sends as any run does; `claw watch --no-notify`'s runs send
nothing (the Watcher in-process, the seam's `send` a fake: tests/sendfake.py)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, text
from helpers import make_project
from sendfake import FakeSend, preview

from claw_batch.clawfile.load import load_project
from claw_batch.notify import send as sending
from claw_batch.run.runner import RunOptions
from claw_batch.terminal.progress import Progress
from claw_batch.triggers.watch import Watcher, WatchOptions

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      triage:
        prompt: "Triage this: {{ read(item.path) }}"
        watch: ["inbox/*.txt"]
        output: "out/{{ item.stem }}.md"
        done: inbox/done
        tools: []
        notify:
          - {on: [always], webhook: "https://hooks.example.org/triage"}
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        fake.handler = lambda body: text("handled")
        yield fake


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSend:
    found = FakeSend()
    monkeypatch.setattr(sending, "send", found)
    monkeypatch.setattr(sending, "preview", preview)
    return found


def watch_once(root: Path, server: FakeOpenAI, *, notify: bool) -> int:
    """Serve until the file there at start is processed (or 20 s pass)."""
    watcher = Watcher(
        load_project(root, None),
        RunOptions(jobs=1, keep_going=True, notify=notify),
        WatchOptions(settle=0.1, rescan=30),
        progress=Progress(io.StringIO()),
        environ={"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"},
        reload=lambda: load_project(root, None),
    )
    deadline = time.monotonic() + 20
    done = root / "inbox" / "done"
    return watcher.serve(
        until=lambda: (done.is_dir() and any(done.iterdir())) or time.monotonic() > deadline
    )


@pytest.mark.parametrize("notify", [True, False])
def test_a_watch_run_sends_unless_no_notify(
    tmp_path: Path, server: FakeOpenAI, fake: FakeSend, notify: bool
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, {"inbox/a.txt": "hello\n"})
    assert watch_once(root, server, notify=notify) == 0
    assert (root / "inbox" / "done" / "a.txt").exists()
    if notify:
        [(_, notice)] = fake.sent
        assert (notice.task, notice.item, notice.status) == ("triage", "inbox/a.txt", "ok")
    else:
        assert fake.sent == []

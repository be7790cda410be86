"""Transcripts: buffered per model turn, on disk at every flush and at the job's end."""

from __future__ import annotations

import time
from pathlib import Path

from scripted import ScriptedLLM, calls, say

from claw_batch.agent.loop import LoopSettings, ToolLoop
from claw_batch.llm.messages import Message
from claw_batch.safety.paths import Policy
from claw_batch.safety.redact import Redactor
from claw_batch.store.transcript import Transcript, read_events
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS

SECRET = "sk-test-0123456789abcdefghij"


def kinds(path: Path) -> list[str]:
    return [e["type"] for e in read_events(path)]


def test_events_reach_the_file_at_flush_and_close(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r1" / "job.jsonl"  # the run's directory is made on demand
    transcript = Transcript(path, Redactor([SECRET]))
    transcript.event("start", job="job")
    transcript.event("user", content=f"the key is {SECRET}")
    assert path.read_text() == ""
    transcript.flush()
    assert kinds(path) == ["start", "user"]
    transcript.event("end", status="ok")
    transcript.close()
    transcript.close()  # twice is harmless
    assert kinds(path) == ["start", "user", "end"]
    assert SECRET not in path.read_text()
    assert read_events(path)[1]["content"] == "the key is [REDACTED]"


def test_the_loop_flushes_each_turn_before_the_model_call(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    path = tmp_path / "job.jsonl"
    transcript = Transcript(path, Redactor())
    on_disk: list[list[str]] = []

    def model_call(request: object) -> object:
        on_disk.append(kinds(path))  # what a crash during this call would leave
        return calls(("read", {"path": "a.txt"})) if len(on_disk) == 1 else say("done")

    deadline = time.monotonic() + 30
    loop = ToolLoop(
        ScriptedLLM(model_call, model_call),  # type: ignore[arg-type]
        {"read": TOOLS["read"]},
        ToolContext(root=tmp_path, policy=Policy(tmp_path), env={}, deadline=deadline),
        LoopSettings(model="m", temperature=None, max_steps=5, deadline=deadline, timeout=30),
        on_event=transcript.event,
        before_call=transcript.flush,
    )
    transcript.event("user", content="go")
    loop.run([Message("user", "go")])
    assert on_disk == [["user"], ["user", "assistant", "tool_result"]]
    transcript.close()
    assert kinds(path) == ["user", "assistant", "tool_result", "assistant"]

"""Where a running job's events go: its transcript, the ledger's calls, the progress display."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from claw_batch.plan.jobs import Job
from claw_batch.run.jobsink import JobSink
from claw_batch.safety.redact import Redactor
from claw_batch.store.state import State
from claw_batch.store.transcript import Transcript, read_events
from claw_batch.terminal.progress import Progress

SECRET = "sk-test-0123456789abcdefghij"
JOB = Job("triage", "inbox/a.txt")


class CountingRedactor(Redactor):
    """The run's redactor, counting the texts it is given."""

    def __init__(self) -> None:
        super().__init__([SECRET])
        self.texts: list[str] = []

    def __call__(self, text: str) -> str:
        self.texts.append(text)
        return super().__call__(text)


class Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def events(sink: JobSink) -> None:
    sink("system", content="You are claw.")
    sink(
        "assistant",
        step=1,
        content=None,
        tool_calls=[{"id": "c0", "name": "read", "arguments": f'{{"path": "{SECRET}"}}'}],
        usage={"prompt": 10, "completion": 5, "cached": 0},
        model="m",
        seconds=0.1,
        cost_usd=None,
    )
    sink("tool_result", id="c0", name="read", ok=False, content=f"error: no {SECRET}")


def make_sink(tmp_path: Path, progress: Progress) -> tuple[JobSink, CountingRedactor]:
    redact = CountingRedactor()
    transcript = Transcript(tmp_path / "t.jsonl", redact)
    state = State(tmp_path / "state.db")
    return JobSink(JOB, transcript, state, "run1", progress), redact


@pytest.mark.parametrize("quiet", [True, False])
def test_in_a_log_each_event_is_redacted_once_for_its_transcript_line(
    tmp_path: Path, quiet: bool
) -> None:
    """A log without -v shows no event: none is prepared for the screen."""
    progress = Progress(Log(), quiet=quiet, ticker=False)
    sink, redact = make_sink(tmp_path, progress)
    events(sink)
    assert len(redact.texts) == 3  # the three transcript lines, nothing else
    sink.transcript.close()
    shown = [e for e in read_events(sink.transcript.path) if e["type"] != "system"]
    assert SECRET not in str(shown) and "[REDACTED]" in str(shown)
    assert sink.usage.prompt_tokens == 10


def test_with_v_the_tool_lines_are_redacted(tmp_path: Path) -> None:
    stream = Log()
    progress = Progress(stream, verbose=True, ticker=False)
    sink, redact = make_sink(tmp_path, progress)
    events(sink)
    progress.close()
    out = stream.getvalue()
    assert f"  {JOB.name}: read " in out and f"  {JOB.name}: read → error: no " in out
    assert SECRET not in out and "[REDACTED]" in out
    assert len(redact.texts) > 3  # the shown events' fields too

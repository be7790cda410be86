"""The progress output of `claw run`: plain lines in a log; on a terminal, a live area
redrawn in place under the lines that scroll, and a table at the end. Driven by hand, with a
fake terminal (a StringIO that says it is one, of a fixed size) and a fake clock; vt100.py
plays the output back to show what the screen holds."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from vt100 import Terminal

from claw_batch.plan.jobs import Job
from claw_batch.terminal.progress import Progress, terminal_size
from claw_batch.terminal.statusarea import Counters, Running, cells, lines

A = Job("triage", "inbox/a.txt")
B = Job("triage", "inbox/b.txt")
SUMMARY = Job("summary")
READ = {"step": 1, "tool_calls": [{"name": "read", "arguments": '{"path": "inbox/a.txt"}'}]}
LS = {"step": 2, "tool_calls": [{"name": "ls", "arguments": "{}"}]}
ANSWER = {"step": 3, "tool_calls": []}
SIZE = (80, 24)


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeLog(io.StringIO):
    def isatty(self) -> bool:
        return False


class Clock:
    """A clock that moves when told (or by `step` at every look), safe across threads."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.now += self.step
            return self.now


@dataclass(frozen=True)
class Result:
    """What Progress reads of a job's result (claw_batch.run.results.JobResult)."""

    job: Job
    status: str
    duration_s: float = 1.0
    tokens: int = 0
    output: str | None = None
    error: str | None = None
    findings: tuple[str, ...] = ()
    reason: str | None = None
    reasons: tuple[str, ...] = ()
    cost_usd: float | None = None
    remembered: str | None = None
    again: str | None = None


@pytest.fixture
def clock() -> Clock:
    return Clock()


def on_tty(clock: Clock, size: tuple[int, int] = SIZE, **kw: bool) -> tuple[Progress, FakeTTY]:
    stream = FakeTTY()
    return Progress(stream, clock=clock, size=lambda: size, ticker=False, **kw), stream


def played(stream: io.StringIO, size: tuple[int, int] = SIZE) -> Terminal:
    terminal = Terminal(*size)
    terminal.feed(stream.getvalue())
    return terminal


def a_run(p: Progress, clock: Clock) -> None:
    """Two fan-out jobs side by side, one up to date, one kept; the first succeeds, the
    second fails its check."""
    p.job_finished(Result(SUMMARY, "up-to-date"))
    p.job_started(A)
    p.job_started(B)
    p.job_event(A, "assistant", READ)
    p.job_event(A, "tool_result", {"name": "read", "ok": True, "content": "help"})
    p.job_event(B, "assistant", READ)
    p.job_event(B, "tool_result", {"name": "read", "ok": False, "content": "error: no such"})
    clock.now += 1.5
    p.job_event(A, "assistant", ANSWER)
    p.job_finished(Result(A, "ok", 1.5, 120, output="tickets/a.json"))
    clock.now += 0.5
    failed = Result(B, "failed", 2.0, 80, error="check failed", findings=("- no owner",))
    p.job_finished(failed)
    p.job_finished(Result(Job("digest"), "modified", reason="output d.md was modified by hand"))
    p.finish()


# Not a terminal: a log.


def test_a_remembered_verdict_says_whose_it_is_not_its_time(clock: Clock) -> None:
    stream = FakeLog()
    p = Progress(stream, clock=clock)
    whose, again = "the verdict of run r1 at 2026-11-27 09:00", "ask again with: claw run -B x"
    p.job_finished(
        Result(
            SUMMARY,
            "failed",
            0.0,
            error="a leftover",
            findings=("- drop it",),
            remembered=whose,
            again=again,
        )
    )
    dry = Result(
        SUMMARY,
        "would-run",
        0.0,
        reasons=(f"remembered: {whose}", again),
        remembered=whose,
        again=again,
    )
    p.job_finished(dry)
    assert stream.getvalue() == (
        "failed summary (remembered: the verdict of run r1 at 2026-11-27 09:00): a leftover\n"
        "    - drop it\n"
        "    ask again with: claw run -B x\n"
        "would fail summary: remembered: the verdict of run r1 at 2026-11-27 09:00; "
        "ask again with: claw run -B x\n"
    )


def test_a_log_gets_one_line_per_event_and_a_total(clock: Clock) -> None:
    stream = FakeLog()
    a_run(Progress(stream, clock=clock), clock)
    assert stream.getvalue() == (
        "start triage[inbox/a.txt]\n"
        "start triage[inbox/b.txt]\n"
        "ok triage[inbox/a.txt] (1.5 s, 120 tokens → tickets/a.json)\n"
        "failed triage[inbox/b.txt] (2.0 s, 80 tokens): check failed\n"
        "    - no owner\n"
        "kept digest: output d.md was modified by hand\n"
        "total: 1 ok, 1 failed, 1 up to date, 1 kept (2.0 s, 200 tokens)\n"
    )


def test_a_log_of_one_job_says_how_many_were_up_to_date(clock: Clock) -> None:
    stream = FakeLog()
    p = Progress(stream, clock=clock)
    p.job_finished(Result(SUMMARY, "up-to-date"))
    p.job_finished(Result(Job("digest"), "up-to-date"))
    p.job_started(A)
    p.job_finished(Result(A, "ok", 1.5, 120, output="tickets/a.json"))
    p.finish()
    assert stream.getvalue() == (
        "start triage[inbox/a.txt]\n"
        "ok triage[inbox/a.txt] (1.5 s, 120 tokens → tickets/a.json)\n"
        "2 jobs up to date\n"
    )


def test_a_quiet_log_has_only_what_went_wrong(clock: Clock) -> None:
    stream = FakeLog()
    p = Progress(stream, quiet=True, clock=clock)
    p.message("claw: nothing to see")
    p.job_started(A)
    p.job_event(A, "assistant", READ)
    p.job_finished(Result(A, "ok", 1.5, 120, output="tickets/a.json"))
    p.job_finished(Result(Job("c"), "limit", 9.0, 10, error="timeout: the job ran longer"))
    p.job_finished(Result(Job("d"), "skipped", 0.0, error="needs c, which failed"))
    p.job_finished(Result(Job("e"), "modified", reason="output e.md was modified by hand"))
    p.finish()
    assert stream.getvalue() == (
        "limit c (9.0 s, 10 tokens): timeout: the job ran longer\n"
        "skipped d (0.0 s, 0 tokens): needs c, which failed\n"
    )


def test_a_verbose_log_has_each_tool_call(clock: Clock) -> None:
    stream = FakeLog()
    a_run(Progress(stream, verbose=True, clock=clock), clock)
    assert stream.getvalue() == (
        "up to date summary\n"
        "start triage[inbox/a.txt]\n"
        "start triage[inbox/b.txt]\n"
        '  triage[inbox/a.txt]: read {"path": "inbox/a.txt"}\n'
        '  triage[inbox/b.txt]: read {"path": "inbox/a.txt"}\n'
        "  triage[inbox/b.txt]: read → error: no such\n"
        "ok triage[inbox/a.txt] (1.5 s, 120 tokens → tickets/a.json)\n"
        "failed triage[inbox/b.txt] (2.0 s, 80 tokens): check failed\n"
        "    - no owner\n"
        "kept digest: output d.md was modified by hand\n"
        "total: 1 ok, 1 failed, 1 up to date, 1 kept (2.0 s, 200 tokens)\n"
    )


def test_the_total_has_the_cost_where_it_is_known(clock: Clock) -> None:
    stream = FakeLog()
    p = Progress(stream, clock=clock)
    p.job_finished(Result(A, "ok", 1.0, 100, cost_usd=0.0125))
    p.job_finished(Result(B, "ok", 1.0, 100, cost_usd=0.0025))
    p.finish()
    p.job_finished(Result(A, "ok", 1.0, 100, cost_usd=0.0125))
    p.job_finished(Result(B, "ok", 1.0, 100))  # a model without a price: no sum
    p.finish()
    p.job_finished(Result(A, "ok", 1.0, 100))
    p.job_finished(Result(B, "ok", 1.0, 100))
    p.finish()
    assert stream.getvalue() == (
        "ok triage[inbox/a.txt] (1.0 s, 100 tokens)\n"
        "ok triage[inbox/b.txt] (1.0 s, 100 tokens)\n"
        "total: 2 ok (0.0 s, 200 tokens, $0.0150)\n"
        "ok triage[inbox/a.txt] (1.0 s, 100 tokens)\n"
        "ok triage[inbox/b.txt] (1.0 s, 100 tokens)\n"
        "total: 2 ok (0.0 s, 200 tokens, $?)\n"
        "ok triage[inbox/a.txt] (1.0 s, 100 tokens)\n"
        "ok triage[inbox/b.txt] (1.0 s, 100 tokens)\n"
        "total: 2 ok (0.0 s, 200 tokens)\n"
    )


# A terminal: the live area, the lines above it, the table.


def test_a_terminal_gets_the_area_then_the_table(clock: Clock) -> None:
    p, stream = on_tty(clock)
    a_run(p, clock)
    assert stream.getvalue() == (
        "\033[?25l"
        "  triage[inbox/a.txt]  step 1   waiting for the model  0s\n"
        "1 running · 0 done · 1 up to date\n"
        "\r\033[2A\033[J"
        "  triage[inbox/a.txt]  step 3   finishing              1s\n"
        "  triage[inbox/b.txt]  step 2   waiting for the model  1s\n"
        "2 running · 0 done · 1 up to date\n"
        "\r\033[3A\033[J"
        "✓ triage[inbox/a.txt] (1.5 s, 120 tokens → tickets/a.json)\n"
        "✗ triage[inbox/b.txt] (2.0 s, 80 tokens): check failed\n"
        "    - no owner\n"
        "0 running · 1 done · 1 failed · 1 up to date\n"
        "\r\033[1A\033[J"
        "kept digest: output d.md was modified by hand\n"
        "\033[?25h"
        "\n"
        "task     ok  failed  up to date  kept  tokens   time\n"
        "summary   -       -           1     -       -      -\n"
        "triage    1       1           -     -     200  2.0 s\n"
        "digest    -       -           -     1       -      -\n"
        "total     1       1           1     1     200  2.0 s\n"
    )
    screen = played(stream)
    assert screen.cursor_visible
    assert screen.text() == (
        "✓ triage[inbox/a.txt] (1.5 s, 120 tokens → tickets/a.json)\n"
        "✗ triage[inbox/b.txt] (2.0 s, 80 tokens): check failed\n"
        "    - no owner\n"
        "kept digest: output d.md was modified by hand\n"
        "\n"
        "task     ok  failed  up to date  kept  tokens   time\n"
        "summary   -       -           1     -       -      -\n"
        "triage    1       1           -     -     200  2.0 s\n"
        "digest    -       -           -     1       -      -\n"
        "total     1       1           1     1     200  2.0 s\n"
    )


def test_the_area_follows_each_job_and_counts_what_is_left(clock: Clock) -> None:
    p, stream = on_tty(clock)
    p.expect("triage", 3)
    p.expect("summary", 1)
    p.job_finished(Result(SUMMARY, "up-to-date"))
    p.job_started(A)
    clock.now = 0.2
    p.job_started(B)
    p.job_event(B, "assistant", {"step": 1, "tool_calls": [READ["tool_calls"][0]] * 2})
    assert played(stream).text() == (
        "  triage[inbox/a.txt]  step 1   waiting for the model  0s\n"
        "  triage[inbox/b.txt]  step 1   waiting for the model  0s\n"
        "1 to run · 2 running · 0 done · 1 up to date\n"
    )
    clock.now = 0.4
    p.job_event(B, "tool_result", {"name": "read", "ok": True, "content": ""})
    assert played(stream).text().splitlines()[1] == (
        "  triage[inbox/b.txt]  step 1   read                   0s"
    )
    clock.now = 1.4
    p.job_event(B, "tool_result", {"name": "read", "ok": True, "content": ""})
    clock.now = 1.5
    p.job_finished(Result(A, "limit", 1.4, 30, error="max_steps: no final answer"))
    assert played(stream).text() == (
        "⏱ triage[inbox/a.txt] (1.4 s, 30 tokens): max_steps: no final answer\n"
        "  triage[inbox/b.txt]  step 2   waiting for the model  1s\n"
        "1 to run · 1 running · 0 done · 1 failed · 1 up to date\n"
    )
    clock.now = 2.0
    p.job_event(B, "assistant", {"step": 2, "tool_calls": []})
    p.job_event(B, "correction", {"message": "not valid JSON"})
    clock.now = 2.1
    p.job_finished(Result(Job("triage", "inbox/c.txt"), "skipped", 0.0, error="needs x"))
    assert played(stream).text().splitlines()[2:] == [
        "  triage[inbox/b.txt]  step 3   waiting for the model  1s",
        "0 to run · 1 running · 0 done · 1 failed · 1 skipped · 1 up to date",
    ]


def test_the_area_is_redrawn_at_most_ten_times_a_second(clock: Clock) -> None:
    p, stream = on_tty(clock, (60, 10))
    p.job_started(A)  # the first frame is drawn at once
    for n in range(50):  # a burst: nothing is drawn before 0.1 s have passed
        clock.now = n / 1000
        p.job_event(A, "assistant", {"step": n + 1, "tool_calls": []})
    first = stream.getvalue()
    assert first.count("\033[J") == 0 and first.count("step 1 ") == 1
    clock.now = 0.099
    p.refresh()
    assert stream.getvalue() == first
    clock.now = 0.1  # the ticker's next look: what changed is drawn
    p.refresh()
    assert stream.getvalue()[len(first) :] == (
        "\r\033[2A\033[J"
        "  triage[inbox/a.txt]  step 50  finishing              0s\n"
        "1 running · 0 done\n"
    )
    drawn = stream.getvalue()
    clock.now = 0.5
    p.refresh()  # nothing changed, not even a second
    assert stream.getvalue() == drawn
    clock.now = 1.0
    p.refresh()  # the job's time did
    assert stream.getvalue()[len(drawn) :] == (
        "\r\033[2A\033[J"
        "  triage[inbox/a.txt]  step 50  finishing              1s\n"
        "1 running · 0 done\n"
    )
    drawn = stream.getvalue()
    clock.now = 1.5
    p.job_event(A, "user", {"content": "a prompt"})  # nothing the area shows
    p.job_event(A, "assistant", {"step": 50, "tool_calls": []})  # the same again
    assert stream.getvalue() == drawn


def test_lines_that_wait_for_a_frame_are_printed_by_the_next(clock: Clock) -> None:
    p, stream = on_tty(clock)
    p.job_started(A)
    p.job_started(B)
    p.job_finished(Result(A, "ok", 0.0, 10))  # at 0.0, as the first frame: it waits
    assert "✓" not in stream.getvalue()
    p.message("claw: a message is printed at once")
    assert played(stream).text() == (
        "✓ triage[inbox/a.txt] (0.0 s, 10 tokens)\n"
        "claw: a message is printed at once\n"
        "  triage[inbox/b.txt]  step 1   waiting for the model  0s\n"
        "1 running · 1 done\n"
    )


def test_colours_unless_no_color(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR")
    p, stream = on_tty(clock)
    p.job_started(A)
    clock.now = 1.0
    p.job_finished(Result(A, "failed", 1.0, 10, error="boom"))
    p.close()
    assert stream.getvalue() == (
        "\033[?25l"
        "  triage[inbox/a.txt]  step 1   waiting for the model  0s\n"
        "1 running · 0 done\n"
        "\r\033[2A\033[J"
        "\033[31m✗\033[0m triage[inbox/a.txt] (1.0 s, 10 tokens): boom\n"
        "0 running · 0 done · \033[31m1 failed\033[0m\n"
        "\r\033[1A\033[J\033[?25h"
    )
    monkeypatch.setenv("NO_COLOR", "1")
    p, stream = on_tty(clock)
    p.job_started(A)
    clock.now = 2.0
    p.job_finished(Result(A, "failed", 1.0, 10, error="boom"))
    p.close()
    assert stream.getvalue() == (
        "\033[?25l"
        "  triage[inbox/a.txt]  step 1   waiting for the model  0s\n"
        "1 running · 0 done\n"
        "\r\033[2A\033[J"
        "✗ triage[inbox/a.txt] (1.0 s, 10 tokens): boom\n"
        "0 running · 0 done · 1 failed\n"
        "\r\033[1A\033[J\033[?25h"
    )


def test_outside_text_is_inert_and_claws_colours_stay(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dropped name, a tool's name, a verdict's summary and findings: their control
    characters print as text, on the area and in the lines; claw's own marks keep colour."""
    monkeypatch.delenv("NO_COLOR")
    p, stream = on_tty(clock, verbose=True)
    dropped = Job("triage", "inbox/x\x1b]0;owned\x07.txt")
    p.job_started(dropped)
    call = {"name": "re\x1b[2Jad", "arguments": '{"path": "\x9b2J"}'}
    p.job_event(dropped, "assistant", {"step": 1, "tool_calls": [call]})
    p.refresh()
    clock.now = 1.0
    verdict = Result(dropped, "failed", error="bad\x1b]52;c;eA==\x07", findings=("\x1b[2Jx",))
    p.job_finished(verdict)
    p.message("claw watch: inbox/\x1b[2J.txt -> done")
    p.close()
    out = stream.getvalue()
    assert "\x1b]" not in out and "\x07" not in out and "\x1b[2J" not in out and "\x9b" not in out
    assert "\033[31m✗\033[0m triage[inbox/x\\x1b]0;owned\\x07.txt] (1.0 s" in out
    assert ": bad\\x1b]52;c;eA==\\x07\n    \\x1b[2Jx\n" in out
    assert "read" not in out and "re\\x1b[2Jad" in out


def test_quiet_on_a_terminal_has_no_area_and_no_table(clock: Clock) -> None:
    p, stream = on_tty(clock, quiet=True)
    a_run(p, clock)
    assert stream.getvalue() == (
        "✗ triage[inbox/b.txt] (2.0 s, 80 tokens): check failed\n    - no owner\n"
    )


def test_verbose_on_a_terminal_scrolls_the_tool_calls_above_the_area(clock: Clock) -> None:
    p, stream = on_tty(clock, verbose=True)
    p.job_finished(Result(SUMMARY, "up-to-date"))
    p.job_started(A)
    clock.now = 1.0
    p.job_event(A, "assistant", READ)
    p.job_event(A, "tool_result", {"name": "read", "ok": False, "content": "error: gone"})
    clock.now = 2.0
    p.job_event(A, "assistant", LS)
    assert played(stream).text() == (
        "up to date summary\n"
        '  triage[inbox/a.txt]: read {"path": "inbox/a.txt"}\n'
        "  triage[inbox/a.txt]: read → error: gone\n"
        "  triage[inbox/a.txt]: ls {}\n"
        "  triage[inbox/a.txt]  step 2   ls                     2s\n"
        "1 running · 0 done · 1 up to date\n"
    )


def test_a_terminal_that_cannot_move_its_cursor_gets_lines(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERM", "dumb")
    p, stream = on_tty(clock)
    p.job_started(A)
    p.job_event(A, "assistant", READ)
    p.job_finished(Result(A, "ok", 1.0, 10))
    p.finish()
    assert stream.getvalue() == "▶ triage[inbox/a.txt]\n✓ triage[inbox/a.txt] (1.0 s, 10 tokens)\n"


def test_the_table_has_a_column_for_each_way_jobs_ended(clock: Clock) -> None:
    p, stream = on_tty(clock)
    p.job_started(A)
    p.job_started(B)
    clock.now = 12.25
    p.job_finished(Result(A, "ok", 12.25, 12_345, cost_usd=0.5))
    p.job_finished(Result(B, "interrupted", 12.0, 45, error="interrupted (Ctrl-C or SIGTERM)"))
    p.job_finished(Result(Job("report"), "skipped", 0.0, error="needs triage, which failed"))
    p.job_finished(Result(Job("check"), "limit", 3.0, 1000, cost_usd=0.001))
    p.finish()
    assert played(stream).text() == (
        "✓ triage[inbox/a.txt] (12.2 s, 12,345 tokens)\n"
        "■ triage[inbox/b.txt] (12.0 s, 45 tokens): interrupted (Ctrl-C or SIGTERM)\n"
        "- report (0.0 s, 0 tokens): needs triage, which failed\n"
        "⏱ check (3.0 s, 1,000 tokens)\n"
        "\n"
        "task    ok  failed  limit  interrupted  skipped  tokens     cost    time\n"
        "triage   1       -      -            1        -  12,390       $?  12.2 s\n"
        "report   -       -      -            -        1       -        -       -\n"
        "check    -       -      1            -        -   1,000  $0.0010       -\n"
        "total    1       -      1            1        1  13,390       $?  12.2 s\n"
    )


def test_each_run_of_a_long_lived_progress_has_its_own_summary(clock: Clock) -> None:
    """claw watch and claw schedule show one run after another."""
    p, stream = on_tty(clock)
    for job in (A, B):
        p.job_finished(Result(SUMMARY, "up-to-date"))
        p.job_started(job)
        clock.now += 1
        p.job_finished(Result(job, "ok", 1.0, 10))
        p.finish()
    assert played(stream).text() == (
        "✓ triage[inbox/a.txt] (1.0 s, 10 tokens)\n"
        "1 job up to date\n"
        "✓ triage[inbox/b.txt] (1.0 s, 10 tokens)\n"
        "1 job up to date\n"
    )


# The area's rows: never more than the terminal has, never wider.


def running_jobs(n: int, name: str = "triage[inbox/{}.txt]") -> list[Running]:
    return [Running(name.format(i), "triage", started=float(i)) for i in range(n)]


COUNTS = Counters(running=32, done=100, failed=2, skipped=0, up_to_date=3, to_run=66)


def test_jobs_that_do_not_fit_are_counted(clock: Clock) -> None:
    assert lines(running_jobs(32), COUNTS, (80, 10), 40.0, color=False) == [
        "  triage[inbox/0.txt]  step 1   waiting for the model  40s",
        "  triage[inbox/1.txt]  step 1   waiting for the model  39s",
        "  triage[inbox/2.txt]  step 1   waiting for the model  38s",
        "  triage[inbox/3.txt]  step 1   waiting for the model  37s",
        "  triage[inbox/4.txt]  step 1   waiting for the model  36s",
        "  triage[inbox/5.txt]  step 1   waiting for the model  35s",
        "  … and 26 more running",
        "66 to run · 32 running · 100 done · 2 failed · 3 up to date",
    ]
    assert len(lines(running_jobs(32), COUNTS, (80, 100), 0.0, color=False)) == 20
    assert lines(running_jobs(32), COUNTS, (80, 3), 0.0, color=False) == [
        "66 to run · 32 running · 100 done · 2 failed · 3 up to date"
    ]
    assert lines(running_jobs(32), COUNTS, (80, 2), 0.0, color=False) == []


def test_long_and_wide_names_are_cut_to_the_width(clock: Clock) -> None:
    jobs = running_jobs(2, "triage[workspace/inbox/a-very-long-name-{}.txt]")
    jobs.append(Running("摘要[笔记/十一月/会议记录.md]", "摘要", started=0.0))
    jobs[0].calls = ["memory_search"]
    rows = lines(jobs, COUNTS, (48, 10), 3725.0, color=False)
    assert rows == [
        "  triage[work…name-0.txt]  step 1   memory_sea…",
        "  triage[work…name-1.txt]  step 1   waiting fo…",
        "  摘要[笔记/…会议记录.md]  step 1   waiting fo…",
        "66 to run · 32 running · 100 done · 2 failed ·…",
    ]
    assert max(cells(row) for row in rows) == 47


def test_the_time_a_job_has_run() -> None:
    at = [0.0, 59.9, 60.0, 3599.0, 3600.0, 7322.0]
    rows = lines(
        [Running(f"j{i}", "t", started=-t) for i, t in enumerate(at)],
        Counters(6, 0, 0, 0, 0, None),
        SIZE,
        0.0,
        color=False,
    )
    assert [row.rsplit(" ", 1)[1] for row in rows[:-1]] == [
        "0s",
        "59s",
        "1m00s",
        "59m59s",
        "1h00m",
        "2h02m",
    ]


# Many jobs at once, and the end of a run that did not end well.


def test_many_jobs_on_many_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """32 threads, 6 jobs each, every event from its job's thread while the clock moves:
    each write is whole, the screen ends clean, nothing is lost."""
    clock = Clock(step=0.001)
    p, stream = on_tty(clock, (100, 30))
    p.expect("triage", 192)
    barrier = threading.Barrier(32)

    def worker(t: int) -> None:
        barrier.wait()
        for n in range(6):
            job = Job("triage", f"inbox/{t:02d}-{n}.txt")
            p.job_started(job)
            p.job_event(job, "assistant", READ)
            p.job_event(job, "tool_result", {"name": "read", "ok": True, "content": "x"})
            p.job_event(job, "assistant", ANSWER)
            p.job_finished(Result(job, "ok" if (t + n) % 7 else "failed", 0.5, 30))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    p.finish()
    screen = played(stream, (100, 30))
    text = screen.text()
    job_lines, table = text.split("\n\n")
    expected = sorted(
        f"{'✓' if (t + n) % 7 else '✗'} triage[inbox/{t:02d}-{n}.txt] (0.5 s, 30 tokens)"
        for t in range(32)
        for n in range(6)
    )
    assert sorted(job_lines.splitlines()) == expected
    assert table.splitlines()[:2] == [
        "task     ok  failed  tokens   time",
        f"triage  165      27   5,760  {table.split()[-2]} s",
    ]
    assert screen.cursor_visible and "running" not in text


def test_an_interrupted_run_leaves_the_terminal_clean(clock: Clock) -> None:
    p, stream = on_tty(clock)
    with pytest.raises(KeyboardInterrupt), p:
        p.job_started(A)
        p.job_started(B)
        clock.now = 0.5
        p.job_event(A, "assistant", READ)
        p.job_finished(Result(B, "ok", 0.5, 10))
        p.job_event(A, "tool_result", {"name": "read", "ok": True, "content": "x"})  # waits
        raise KeyboardInterrupt  # Ctrl-C, or SIGTERM made one, or a bug
    screen = played(stream)
    assert screen.cursor_visible
    assert screen.text() == "✓ triage[inbox/b.txt] (0.5 s, 10 tokens)\n"
    assert stream.getvalue().endswith(
        "\r\033[3A\033[J✓ triage[inbox/b.txt] (0.5 s, 10 tokens)\n\033[?25h"
    )
    p.close()  # twice is harmless
    assert played(stream).text() == "✓ triage[inbox/b.txt] (0.5 s, 10 tokens)\n"


def test_the_ticker_thread_ends_with_the_run(clock: Clock) -> None:
    stream = FakeTTY()
    p = Progress(stream, clock=clock, size=lambda: SIZE)
    p.job_started(A)
    assert [t.name for t in threading.enumerate() if t.name == "claw-progress"] == ["claw-progress"]
    p.job_finished(Result(A, "ok", 1.0, 10))
    p.finish()
    assert [t.name for t in threading.enumerate() if t.name == "claw-progress"] == []
    assert played(stream).text() == "✓ triage[inbox/a.txt] (1.0 s, 10 tokens)\n"


def test_the_size_of_a_stream_that_is_no_terminal() -> None:
    assert terminal_size(FakeTTY())() == (80, 24)


@pytest.fixture(autouse=True)
def no_dumb_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TERM", "xterm")
    yield


def test_the_area_shows_the_node_each_job_runs_on(clock: Clock) -> None:
    """--executor ray: a job's row says where it runs once its worker says so; a job whose
    node is not known yet has a blank there."""
    p, stream = on_tty(clock)
    p.job_started(A)
    clock.now = 0.2
    p.job_started(B)
    clock.now = 0.4
    p.job_node(A, "127.0.0.1 (a3f09c1e)")
    assert played(stream).text() == (
        "  triage[inbox/a.txt]  127.0.0.1 (a3f09c1e)  step 1   waiting for the model  0s\n"
        "  triage[inbox/b.txt]                        step 1   waiting for the model  0s\n"
        "2 running · 0 done\n"
    )
    clock.now = 0.6
    p.job_node(B, "127.0.0.2 (5be4d07f)\x1b[2J")  # a worker's word: shown inert
    row = played(stream).text().splitlines()[1]
    assert row.startswith("  triage[inbox/b.txt]  127.0.0.2 (5") and "\\x1b[2J" in row
    assert "\x1b[2J" not in stream.getvalue()
    clock.now = 1.0
    p.job_finished(Result(A, "ok", 1.0, 10))
    p.job_finished(Result(B, "ok", 1.0, 10))
    p.finish()
    assert "a3f09c1e" not in played(stream).text()  # the area went with the run


def test_a_verbose_log_says_the_node(clock: Clock) -> None:
    stream = FakeLog()
    p = Progress(stream, clock=clock, verbose=True, ticker=False)
    p.job_started(A)
    p.job_node(A, "127.0.0.1 (a3f09c1e)")
    quiet_log = FakeLog()
    q = Progress(quiet_log, clock=clock, ticker=False)
    q.job_started(A)
    q.job_node(A, "127.0.0.1 (a3f09c1e)")
    assert stream.getvalue() == (
        "start triage[inbox/a.txt]\n  triage[inbox/a.txt]: on 127.0.0.1 (a3f09c1e)\n"
    )
    assert quiet_log.getvalue() == "start triage[inbox/a.txt]\n"

"""Human progress on stderr. On a terminal: finished jobs scroll as one line each above a
live status area (the running jobs, each with its model turn and current tool, and the
run's counters), and a table per task at the end. Elsewhere (cron, CI, a pipe): plain
one-line events and one total line, for a log read the next morning.

Jobs call in from their threads: every method takes one lock, and the area is redrawn at
most ten times a second (livescreen.Frames); a log pays for nothing it does not print."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, TextIO

from claw_batch.figures import count
from claw_batch.safety.onscreen import visible
from claw_batch.terminal.livescreen import Frames, Ticker
from claw_batch.terminal.runtotals import RunTotals
from claw_batch.terminal.statusarea import Counters, Running, lines


class _Job(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def task(self) -> str: ...


class _Result(Protocol):
    @property
    def job(self) -> _Job: ...
    @property
    def status(self) -> str: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def tokens(self) -> int: ...
    @property
    def error(self) -> str | None: ...
    @property
    def output(self) -> str | None: ...
    @property
    def findings(self) -> Sequence[str]: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def reasons(self) -> Sequence[str]: ...
    @property
    def cost_usd(self) -> float | None: ...
    @property
    def remembered(self) -> str | None: ...  # a failed check's verdict given again: whose
    @property
    def again(self) -> str | None: ...  # and how to ask the model again


# Jobs that did not run are one line each only when they need attention (or with -v).
QUIET_STATUSES = frozenset({"up-to-date", "modified", "would-run"})
SYMBOLS = {"ok": "✓", "failed": "✗", "limit": "⏱", "interrupted": "■", "skipped": "-"}
COLORS = {"ok": "32", "failed": "31", "limit": "33", "interrupted": "33", "skipped": "2"}
FAILED = frozenset({"failed", "limit", "interrupted"})
SHOWN_EVENTS = frozenset({"assistant", "tool_result", "correction"})  # the rest change nothing


def terminal_size(stream: TextIO) -> Callable[[], tuple[int, int]]:
    def size() -> tuple[int, int]:
        try:
            columns, rows = os.get_terminal_size(stream.fileno())
        except (OSError, ValueError):
            return 80, 24
        return columns or 80, rows or 24

    return size


class Progress:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        quiet: bool = False,
        verbose: bool = False,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        size: Callable[[], tuple[int, int]] | None = None,
        ticker: bool = True,  # a thread redraws the area (tests draw with refresh())
    ) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.verbose = verbose
        self.tty = self.stream.isatty() if tty is None else tty
        self.color = self.tty and "NO_COLOR" not in os.environ
        # A terminal that cannot move its cursor gets the lines without the area.
        self.live = self.tty and not quiet and os.environ.get("TERM") != "dumb"
        self.clock = clock
        self.size = size or terminal_size(self.stream)
        self._lock = threading.Lock()
        self._frames = Frames(self.stream, clock, self._area)
        self._ticker = Ticker(self.refresh) if ticker else None
        self._reset()

    def _reset(self) -> None:
        """What one run shows (claw watch and claw schedule show several)."""
        self.totals = RunTotals()
        self._running: dict[str, Running] = {}
        self._planned: dict[str, int] = {}
        self._warned: set[str] = set()

    @property
    def up_to_date(self) -> int:
        return self.totals.count("up-to-date")

    # The run's events.

    def expect(self, task: str, jobs: int) -> None:
        """How many jobs the task has (for the "to run" counter): said once it is known,
        again when it changes (a fan-out expanded after its upstream ran)."""
        with self._lock:
            self._planned[task] = jobs

    def expect_jobs(self, plan: Callable[[], Iterable[_Job]]) -> None:
        """An estimate of every task's jobs, from the plan before the run (a fan-out over
        an upstream's outputs may find more once they exist); an error in it is the run's
        to report, not this one's."""
        from claw_batch.errors import ClawError

        try:
            jobs = list(plan())
        except ClawError:
            return
        counts: dict[str, int] = {}
        for job in jobs:
            counts[job.task] = counts.get(job.task, 0) + 1
        for task, n in counts.items():
            self.expect(task, n)

    def message(self, text: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self._frames.print(visible(text).split("\n"), force=True)

    def warn_once(self, text: str) -> None:
        """A warning, printed once a run however many jobs meet it (a fan-out's read() of
        one large file); shown with -q too: it says the run did less than asked."""
        with self._lock:
            if text in self._warned:
                return
            self._warned.add(text)
            self._frames.print(visible(text).split("\n"), force=True)

    def job_started(self, job: _Job) -> None:
        if self.quiet:
            return
        with self._lock:
            now = self.clock()
            self.totals.of(job.task, now).started(now)
            name = visible(job.name)  # its item: a dropped file's name
            if not self.live:
                self._frames.print([f"▶ {name}" if self.tty else f"start {name}"])
                return
            self._running[job.name] = Running(name, job.task, now)
            self._frames.start()
            if self._ticker is not None:
                self._ticker.start()
            self._frames.print([])

    def job_node(self, job: _Job, node: str) -> None:
        """The cluster node a started job runs on (--executor ray: Worker.started). The live
        area shows it beside the job; a log says it with -v (the ledger keeps it: claw log)."""
        if self.quiet:
            return
        with self._lock:
            shown = visible(node)  # what a worker said of itself
            running = self._running.get(job.name)
            if running is not None:
                running.node = shown
                self._frames.print([])
            elif self.verbose and not self.live:
                self._frames.print([f"  {visible(job.name)}: on {shown}"])

    def shows(self, kind: str) -> bool:
        """Whether job_event does anything with an event of `kind`: a job asks before it
        prepares the event's fields for the screen (in a log, the common case, none is)."""
        return not self.quiet and (self.live or self.verbose) and kind in SHOWN_EVENTS

    def job_event(self, job: _Job, kind: str, fields: Mapping[str, Any]) -> None:
        if not self.shows(kind):
            return  # the common case in a log: nothing to do, not even the lock
        with self._lock:
            running = self._running.get(job.name)
            if running is not None:
                running.follow(kind, fields)
            shown = _tool_lines(job, kind, fields) if self.verbose else []
            self._frames.print([visible(line) for line in shown])

    def job_finished(self, result: _Result) -> None:
        if result.status == "up-to-date" and not (self.verbose or self.live):
            # Counted, never shown, and no area to redraw (100,000 of them in a no-op): once
            # its task is known, no clock, no running row to drop, no line.
            with self._lock:
                totals = self.totals.tasks.get(result.job.task)
                if totals is not None:
                    totals.statuses["up-to-date"] = totals.statuses.get("up-to-date", 0) + 1
                    return
        with self._lock:
            now = self.clock()
            totals = self.totals.of(result.job.task, now)
            totals.add(result.status, result.tokens, result.cost_usd, now)
            self._running.pop(result.job.name, None)
            if not self.quiet or result.status in FAILED or result.status == "skipped":
                self._frames.print(self._finished_lines(result))

    def jobs_up_to_date(self, results: Sequence[_Result]) -> None:
        """`job_finished` for the jobs of one task found up to date at once: counted in one
        step when nothing is shown for them."""
        if self.verbose or self.live or not results:
            for result in results:
                self.job_finished(result)
            return
        self.job_finished(results[0])  # its task's totals, if this is its first result
        with self._lock:
            statuses = self.totals.tasks[results[0].job.task].statuses
            statuses["up-to-date"] += len(results) - 1

    def finish(self) -> None:
        """The run ended: the area goes, the summary stays."""
        if self._ticker is not None:
            self._ticker.stop()
        with self._lock:
            self._frames.end([] if self.quiet else self._summary())
            self._reset()

    def close(self) -> None:
        """Leave the terminal clean, whatever happened (Ctrl-C, an error): what waited to
        be drawn is printed, the area erased, the cursor shown."""
        if self._ticker is not None:
            self._ticker.stop()
        with self._lock:
            self._frames.end([])

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def refresh(self) -> None:
        """Redraw the area if something changed, or a second passed (the jobs' times)."""
        with self._lock:
            self._frames.tick()

    # Lines.

    def _finished_lines(self, result: _Result) -> list[str]:
        status, name = result.status, visible(result.job.name)  # an item: a dropped name
        if status in QUIET_STATUSES:
            return [visible(line) for line in self._not_run(result)]
        failed = status != "ok"
        detail = f"{result.duration_s:.1f} s, {count(result.tokens, 'token')}"
        if result.remembered:
            detail = f"remembered: {result.remembered}"
        if result.output and not failed:
            detail += f" → {result.output}"
        detail = visible(detail)  # before claw paints its mark
        if self.tty:
            mark = self._paint(status, SYMBOLS.get(status, "?"))
            line = f"{mark} {name} ({detail})"
        else:
            line = f"{status} {name} ({detail})"
        if failed and result.error:
            line += f": {visible(result.error)}"  # a verdict's summary is the model's text
        lines = [line, *(f"    {visible(finding)}" for finding in result.findings)]
        if result.again:
            lines.append(f"    {visible(result.again)}")
        return lines

    def _not_run(self, result: _Result) -> list[str]:
        name = result.job.name
        if result.status == "up-to-date":
            return [f"up to date {name}"] if self.verbose else []
        if result.status == "modified":
            return [f"kept {name}: {result.reason}"]
        verb = "would fail" if result.remembered else "would run"  # a verdict given again
        return [f"{verb} {name}: {'; '.join(result.reasons)}"]

    def _summary(self) -> list[str]:
        now = self.clock()
        if self.totals.total().ran >= 2:
            return ["", *self.totals.table(now)] if self.tty else [self.totals.line(now)]
        n = self.up_to_date
        if n and not self.verbose:
            return [f"{n} job{'s' if n != 1 else ''} up to date"]
        return []

    def _paint(self, status: str, text: str) -> str:
        return f"\033[{COLORS.get(status, '0')}m{text}\033[0m" if self.color else text

    def _area(self, now: float) -> list[str]:
        """The live area's rows now (Frames calls it, with the lock held)."""
        running = list(self._running.values())
        t = self.totals
        counters = Counters(
            running=len(running),
            done=t.count("ok"),
            failed=sum(t.count(s) for s in FAILED),
            skipped=t.count("skipped"),
            up_to_date=t.count("up-to-date") + t.count("modified"),
            to_run=self._to_run(running),
        )
        return lines(running, counters, self.size(), now, self.color)

    def _to_run(self, running: list[Running]) -> int | None:
        if not self._planned:
            return None
        left = 0
        for task, planned in self._planned.items():
            totals = self.totals.tasks.get(task)
            settled = sum(totals.statuses.values()) if totals else 0
            left += max(planned - settled - sum(r.task == task for r in running), 0)
        return left


def _tool_lines(job: _Job, kind: str, fields: Mapping[str, Any]) -> list[str]:
    """-v: each tool call, and each that failed with what it said."""
    if kind == "assistant":
        return [
            f"  {job.name}: {call['name']} {call['arguments'][:100]}"
            for call in fields.get("tool_calls", [])
        ]
    if kind == "tool_result" and not fields.get("ok"):
        return [f"  {job.name}: {fields['name']} → {str(fields['content'])[:160]}"]
    return []

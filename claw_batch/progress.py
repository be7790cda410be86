"""Human progress on stderr: one line per job start and finish; compact when not a TTY."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TextIO


class _Job(Protocol):
    @property
    def name(self) -> str: ...


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


# Jobs that did not run are one line each only when they need attention (or with -v).
QUIET_STATUSES = frozenset({"up-to-date", "modified", "would-run"})
SYMBOLS = {"ok": "✓", "failed": "✗", "limit": "⏱", "interrupted": "■", "skipped": "-"}
COLORS = {"ok": "32", "failed": "31", "limit": "33", "interrupted": "33", "skipped": "2"}


class Progress:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        quiet: bool = False,
        verbose: bool = False,
        tty: bool | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.verbose = verbose
        self.tty = self.stream.isatty() if tty is None else tty
        self.color = self.tty and "NO_COLOR" not in os.environ
        self.up_to_date = 0

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def _paint(self, status: str, text: str) -> str:
        return f"\033[{COLORS.get(status, '0')}m{text}\033[0m" if self.color else text

    def message(self, text: str) -> None:
        if not self.quiet:
            self._print(text)

    def job_started(self, job: _Job) -> None:
        if self.quiet:
            return
        self._print(f"▶ {job.name}" if self.tty else f"start {job.name}")

    def job_event(self, job: _Job, kind: str, fields: Mapping[str, Any]) -> None:
        if not self.verbose or self.quiet:
            return
        if kind == "assistant":
            for call in fields.get("tool_calls", []):
                self._print(f"  {job.name}: {call['name']} {call['arguments'][:100]}")
        elif kind == "tool_result" and not fields.get("ok"):
            self._print(f"  {job.name}: {fields['name']} → {str(fields['content'])[:160]}")

    def job_finished(self, result: _Result) -> None:
        if result.status in QUIET_STATUSES:
            self._not_run(result)
            return
        failed = result.status != "ok"
        if self.quiet and not failed:
            return
        detail = f"{result.duration_s:.1f} s, {result.tokens:,} tokens"
        if result.output and not failed:
            detail += f" → {result.output}"
        name = result.job.name
        if self.tty:
            mark = self._paint(result.status, SYMBOLS.get(result.status, "?"))
            line = f"{mark} {name} ({detail})"
        else:
            line = f"{result.status} {name} ({detail})"
        if failed and result.error:
            line += f": {result.error}"
        self._print(line)
        for finding in result.findings:
            self._print(f"    {finding}")

    def _not_run(self, result: _Result) -> None:
        if result.status == "up-to-date":
            self.up_to_date += 1
            if self.verbose and not self.quiet:
                self._print(f"up to date {result.job.name}")
        elif result.status == "modified" and not self.quiet:
            self._print(f"kept {result.job.name}: {result.reason}")
        elif result.status == "would-run" and not self.quiet:
            why = "; ".join(result.reasons)
            self._print(f"would run {result.job.name}: {why}")

    def finish(self) -> None:
        if self.up_to_date and not self.verbose and not self.quiet:
            n = self.up_to_date
            self._print(f"{n} job{'s' if n != 1 else ''} up to date")

"""One JSONL transcript per job, secrets redacted.

Events are kept in memory and written together when the job is about to wait for the model
(`flush`, called by the tool loop before each model call) and when the transcript is closed
(the job's end, however it ended): one system call per model turn rather than one per event,
each of which hands the GIL to another job. What a crash can lose is the turn in progress:
the model's last reply and the tool results of that turn.

A transcript that cannot be written (a full disk) fails its job, once, with `TaskFailed`:
the file is left as it was before that write (no torn line), and later events are dropped.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from claw_batch.errors import TaskFailed
from claw_batch.safety.redact import Redactor

OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
# One encoder for every line: json.dumps with options builds a new one each call.
_encode = json.JSONEncoder(ensure_ascii=False, default=str).encode


class Transcript:
    def __init__(self, path: Path, redact: Redactor) -> None:
        self.path = path
        self.redact = redact
        self._failure: str | None = None  # not yet reported to the job
        try:
            try:
                self._fd = os.open(path, OPEN_FLAGS, 0o666)
            except FileNotFoundError:  # the run's first transcript
                path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(path, OPEN_FLAGS, 0o666)
            self._size = os.fstat(self._fd).st_size
        except OSError as e:
            self._fd, self._size = -1, 0
            self._failure = self._unwritten(e)
        self._lines: list[str] = []
        self._started = time.monotonic()

    def event(self, kind: str, **fields: Any) -> None:
        t = round(time.monotonic() - self._started, 3)
        if kind == "system":  # the system prompt the jobs of a task share: see _system_line
            self._lines.append(_system_line(self.redact, t, fields))
            return
        line = _encode({"t": t, "type": kind, **fields})
        self._lines.append(self.redact(line) + "\n")

    def flush(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise TaskFailed(failure)
        if not self._lines or self._fd < 0:
            return
        # A lone surrogate (half an emoji a server cut) is only ever inside a JSON string:
        # written as JSON's escape for it, `\ud83d`, the line stays UTF-8 and reads back.
        data = "".join(self._lines).encode("utf-8", "backslashreplace")
        self._lines.clear()
        view = memoryview(data)
        try:
            while view:  # O_APPEND: a short write (a signal) goes on at the end
                view = view[os.write(self._fd, view) :]
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            os.close(self._fd)
            self._fd = -1
            raise TaskFailed(self._unwritten(e)) from None
        self._size += len(data)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _unwritten(self, error: OSError) -> str:
        return f"transcript {self.path}: {error.strerror or error}"


# The last system event's line, with what it was made of: (redactor, t, content, line).
_last_system: tuple[Redactor, float, object, str] | None = None


def _system_line(redact: Redactor, t: float, fields: dict[str, Any]) -> str:
    """A `system` event's line, encoded and redacted once for the jobs whose system prompt
    is one text (agent.systemprompt hands them one object) and that write it at the same
    `t` (0.0 or so: it is a job's second event): the line is the same."""
    global _last_system
    content = fields.get("content")
    last = _last_system
    same = last is not None and last[0] is redact and last[1] == t and last[2] is content
    if same and len(fields) == 1 and last is not None:
        return last[3]
    line = redact(_encode({"t": t, "type": "system", **fields})) + "\n"
    if len(fields) == 1 and isinstance(content, str):
        _last_system = (redact, t, content, line)
    return line


def read_events(path: Path) -> list[dict[str, Any]]:
    events = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    events.append(json.loads(line))
                # a line torn by a crash (or nested past what json reads): the rest is
                # still worth showing
                except (ValueError, RecursionError):
                    continue
    return events

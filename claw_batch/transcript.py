"""One JSONL transcript per job, secrets redacted.

Events are kept in memory and written together when the job is about to wait for the model
(`flush`, called by the tool loop before each model call) and when the transcript is closed
(the job's end, however it ended): one system call per model turn rather than one per event,
each of which hands the GIL to another job. What a crash can lose is the turn in progress:
the model's last reply and the tool results of that turn.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from claw_batch.redact import Redactor

OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


class Transcript:
    def __init__(self, path: Path, redact: Redactor) -> None:
        self.path = path
        self.redact = redact
        try:
            self._fd = os.open(path, OPEN_FLAGS, 0o666)
        except FileNotFoundError:  # the run's first transcript
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, OPEN_FLAGS, 0o666)
        self._lines: list[str] = []
        self._started = time.monotonic()

    def event(self, kind: str, **fields: Any) -> None:
        record = {"t": round(time.monotonic() - self._started, 3), "type": kind, **fields}
        line = json.dumps(record, ensure_ascii=False, default=str)
        self._lines.append(self.redact(line) + "\n")

    def flush(self) -> None:
        if not self._lines or self._fd < 0:
            return
        data = "".join(self._lines).encode("utf-8")
        self._lines.clear()
        view = memoryview(data)
        while view:  # O_APPEND: a short write (a full disk, a signal) goes on at the end
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = -1


def read_events(path: Path) -> list[dict[str, Any]]:
    events = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    events.append(json.loads(line))
                except ValueError:  # a line torn by a crash: the rest is still worth showing
                    continue
    return events

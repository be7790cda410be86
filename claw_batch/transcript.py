"""One JSONL transcript per job, appended event by event, secrets redacted."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from claw_batch.redact import Redactor


class Transcript:
    def __init__(self, path: Path, redact: Redactor) -> None:
        self.path = path
        self._redact = redact
        try:
            self._file: TextIO = path.open("a", encoding="utf-8")
        except FileNotFoundError:  # the run's first transcript
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        self._started = time.monotonic()

    def event(self, kind: str, **fields: Any) -> None:
        record = {"t": round(time.monotonic() - self._started, 3), "type": kind, **fields}
        line = json.dumps(record, ensure_ascii=False, default=str)
        self._file.write(self._redact(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


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

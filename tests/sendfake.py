"""A stand-in for claw_batch.notify.send at the run's seam (its `send` and `preview`), until
the real targets are tested end to end: a `command:` delivery is run for real, the notice as
JSON on its stdin; any other target is kept in `sent`, and delivered unless its variable
(url_env) is unset or its address says `fail`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from claw_batch.config import Delivery
from claw_batch.notify.notice import Notice
from claw_batch.notify.send import Sent


def payload(notice: Notice) -> dict[str, Any]:
    found = dataclasses.asdict(notice)
    found["counts"] = dict(notice.counts)
    return found


class FakeSend:
    def __init__(self) -> None:
        self.sent: list[tuple[Delivery, Notice]] = []
        self.lock = threading.Lock()
        self.before: Callable[[Delivery, Notice], None] | None = None  # a test's hold

    def __call__(
        self,
        delivery: Delivery,
        notice: Notice,
        *,
        environ: Mapping[str, str],
        redact: Callable[[str], str],
        sleep: Callable[[float], None] | None = None,
        project: Path | None = None,
    ) -> Sent:
        if self.before is not None:
            self.before(delivery, notice)
        with self.lock:
            self.sent.append((delivery, notice))
        attempts = 1 + delivery.retries
        if delivery.kind == "command":
            try:
                done = subprocess.run(
                    list(delivery.command),
                    cwd=project,
                    input=json.dumps(payload(notice)),
                    text=True,
                    capture_output=True,
                    timeout=delivery.timeout,
                )
            except subprocess.TimeoutExpired:
                return Sent(
                    delivery.target, False, attempts, f"timed out after {delivery.timeout} s"
                )
            if done.returncode:
                error = redact(f"exit {done.returncode}: {done.stderr.strip()}")
                return Sent(delivery.target, False, attempts, error)
            return Sent(delivery.target, True, 1)
        if delivery.url_env and not environ.get(delivery.url_env):
            return Sent(delivery.target, False, 1, f"{delivery.url_env} is not set")
        if any("fail" in a for a in delivery.to) or "fail" in (delivery.url or ""):
            return Sent(delivery.target, False, attempts, "HTTP 500")
        return Sent(delivery.target, True, 1)


def preview(delivery: Delivery, notice: Notice) -> str:
    return f"{delivery.target}: {notice.task} {notice.status}"


def receiver(path: Path) -> list[str]:
    """A `command:` that appends each payload it is given to `path`, one JSON per line."""
    code = "import sys; open(sys.argv[1], 'a').write(sys.stdin.read().replace('\\n', ' ') + '\\n')"
    return [sys.executable, "-c", code, str(path)]


def received(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]

"""A stdio server's stderr: never on claw's terminal, kept in `.claw/mcp/SERVER.log` (redacted
with the hub's secrets; at most MAX_BYTES, then the log moves to SERVER.log.1 once per
MAX_BYTES, so at most twice that is kept) and its last lines in memory, for the message that
says why the server died. The file stays open while the server runs: a flood costs a write
per chunk, never a reopen or a copy."""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from pathlib import Path

MAX_BYTES = 1 << 20
TAIL_LINES = 8
LINE_CHARS = 300  # a line longer than this is cut in the tail (the log keeps it whole)
HELD_BYTES = 4096  # an unfinished line longer than this is written as it is (redacted)
FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def log_path(root: Path, server: str) -> Path:
    return root / shown_path(server)


def shown_path(server: str) -> str:
    return f".claw/mcp/{server}.log"


class ErrLog:
    """Appends what a server writes on stderr to its log; `tail()` is its last lines."""

    def __init__(
        self,
        path: Path | None,
        shown: str = "",
        max_bytes: int = MAX_BYTES,
        redact: Callable[[str], str] = str,
    ) -> None:
        self.path, self.max_bytes, self.redact = path, max_bytes, redact
        self.shown = shown or str(path)  # how messages name it
        self._lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._partial = b""
        self._held = b""  # the end of the last chunk, up to its unfinished line
        self._size = 0
        self._fd: int | None = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._open()
            except OSError:
                self.path = None  # the log is a convenience: a server runs without one

    def note(self, line: str) -> None:
        """A line of claw's own (a start, an exit), marked as such."""
        self._flush()
        self._append(f"[claw] {line}\n".encode())

    def write(self, data: bytes) -> None:
        """A chunk of its stderr: whole lines are written (redacted) at once, an unfinished
        one when the next ends it (or it passes HELD_BYTES), so a secret is not cut in two."""
        held = self._held + data
        end = held.rfind(b"\n") + 1
        if end == 0 and len(held) <= HELD_BYTES:
            self._held = held
        else:
            end = end or len(held)
            self._held = held[end:]
            self._append(self._redacted(held[:end]))
        text = (self._partial + data).decode("utf-8", "replace").split("\n")
        self._partial = text.pop().encode()[-LINE_CHARS:]
        self._lines.extend(line[:LINE_CHARS] for line in text if line.strip())

    def tail(self) -> str:
        """The last lines it wrote, for a failure message ("" when it wrote nothing)."""
        lines = list(self._lines)
        if self._partial.strip():
            lines.append(self._partial.decode("utf-8", "replace"))
        return self.redact("\n".join(lines[-TAIL_LINES:]))

    def close(self) -> None:
        self._flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _flush(self) -> None:
        if self._held:
            self._append(self._redacted(self._held))
            self._held = b""

    def _redacted(self, data: bytes) -> bytes:
        return self.redact(data.decode("utf-8", "surrogateescape")).encode(
            "utf-8", "surrogateescape"
        )

    def _open(self) -> None:
        assert self.path is not None
        self._fd = os.open(self.path, FLAGS, 0o600)
        self._size = os.fstat(self._fd).st_size

    def _append(self, data: bytes) -> None:
        if self._fd is None or not data:
            return
        try:
            if self._size and self._size + len(data) > self.max_bytes:
                self._rotate()
            os.write(self._fd, data[-self.max_bytes :])
            self._size += min(len(data), self.max_bytes)
        except OSError:
            pass  # the log is a convenience: a server runs without one

    def _rotate(self) -> None:
        """SERVER.log becomes SERVER.log.1 (the one before goes), a new one starts."""
        assert self.path is not None and self._fd is not None
        os.close(self._fd)
        self._fd = None
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._open()

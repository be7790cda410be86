"""A stdio server's stderr: never on claw's terminal, kept in `.claw/mcp/SERVER.log` (at most
MAX_BYTES: the older half goes when it is full) and its last lines in memory, for the message
that says why the server died."""

from __future__ import annotations

import collections
import os
from pathlib import Path

MAX_BYTES = 1 << 20
TAIL_LINES = 8
LINE_CHARS = 300  # a line longer than this is cut in the tail (the log keeps it whole)


def log_path(root: Path, server: str) -> Path:
    return root / shown_path(server)


def shown_path(server: str) -> str:
    return f".claw/mcp/{server}.log"


class ErrLog:
    """Appends what a server writes on stderr to its log; `tail()` is its last lines."""

    def __init__(self, path: Path | None, shown: str = "", max_bytes: int = MAX_BYTES) -> None:
        self.path, self.max_bytes = path, max_bytes
        self.shown = shown or str(path)  # how messages name it
        self._lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._partial = b""
        self._size = 0
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._size = path.stat().st_size if path.is_file() else 0
            except OSError:
                self.path = None  # the log is a convenience: a server runs without one

    def note(self, line: str) -> None:
        """A line of claw's own (a start, an exit), marked as such."""
        self._append(f"[claw] {line}\n".encode())

    def write(self, data: bytes) -> None:
        self._append(data)
        text = (self._partial + data).decode("utf-8", "replace").split("\n")
        self._partial = text.pop().encode()[-LINE_CHARS:]
        self._lines.extend(line[:LINE_CHARS] for line in text if line.strip())

    def tail(self) -> str:
        """The last lines it wrote, for a failure message ("" when it wrote nothing)."""
        lines = list(self._lines)
        if self._partial.strip():
            lines.append(self._partial.decode("utf-8", "replace"))
        return "\n".join(lines[-TAIL_LINES:])

    def _append(self, data: bytes) -> None:
        if self.path is None or not data:
            return
        if self._size + len(data) > self.max_bytes:
            self._halve()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError:
            return  # the log is a convenience: a server runs without one
        try:
            os.write(fd, data[-self.max_bytes :])
            self._size = os.fstat(fd).st_size
        finally:
            os.close(fd)

    def _halve(self) -> None:
        """Keep the newer half of the log."""
        assert self.path is not None
        try:
            kept = self.path.read_bytes()[-(self.max_bytes // 2) :]
            tmp = self.path.with_suffix(".log.tmp")
            tmp.write_bytes(kept)
            os.replace(tmp, self.path)
            self._size = len(kept)
        except OSError:
            self._size = 0

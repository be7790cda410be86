"""A tiny terminal: what a screen shows after some output, for the progress tests.

It knows only what claw's live area writes (cursor up, clear to the end of the screen,
hide/show the cursor, colours) and raises on any other escape code, so that a test also
checks claw writes nothing else. Lines wrap at the last column, as a terminal's do; the
scrollback is kept (rows scrolled off the top are lines like the others)."""

from __future__ import annotations

import re

CSI = re.compile(r"\033\[(\??)([0-9;]*)([A-Za-z])")


class Terminal:
    def __init__(self, columns: int = 80, rows: int = 24) -> None:
        self.columns = columns
        self.rows = rows
        self.lines: list[list[str]] = [[]]
        self.row = 0
        self.col = 0
        self.cursor_visible = True

    def feed(self, text: str) -> None:
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\033":
                m = CSI.match(text, i)
                if m is None:
                    raise ValueError(f"unexpected escape at {text[i : i + 10]!r}")
                self._csi(*m.groups())
                i = m.end()
                continue
            if c == "\r":
                self.col = 0
            elif c == "\n":  # a terminal's ONLCR: a newline is a carriage return too
                self.col = 0
                self._down()
            else:
                self._put(c)
            i += 1

    def _csi(self, private: str, params: str, final: str) -> None:
        if private:
            if params + final == "25l":
                self.cursor_visible = False
            elif params + final == "25h":
                self.cursor_visible = True
            else:
                raise ValueError(f"unexpected escape ?{params}{final}")
        elif final == "A":
            top = max(len(self.lines) - self.rows, 0)
            self.row = max(self.row - int(params or "1"), top)
        elif final == "J" and params in ("", "0"):
            del self.lines[self.row + 1 :]
            del self.lines[self.row][self.col :]
        elif final != "m":  # colours change nothing on this screen
            raise ValueError(f"unexpected escape {params}{final}")

    def _put(self, c: str) -> None:
        if self.col >= self.columns:  # the previous character took the last column
            self.col = 0
            self._down()
        line = self.lines[self.row]
        line.extend(" " * (self.col - len(line)))
        if self.col < len(line):
            line[self.col] = c
        else:
            line.append(c)
        self.col += 1

    def _down(self) -> None:
        self.row += 1
        if self.row == len(self.lines):
            self.lines.append([])

    def text(self) -> str:
        """Every line, scrollback included, without trailing blanks and empty last lines."""
        out = "\n".join("".join(line).rstrip() for line in self.lines).rstrip("\n")
        return out + "\n" if out else ""

    def screen(self) -> list[str]:
        """The rows the terminal shows now."""
        shown = ["".join(line).rstrip() for line in self.lines[-self.rows :]]
        return shown + [""] * (self.rows - len(shown))

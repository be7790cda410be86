"""Drawing on a terminal: lines that scroll and stay, and under them an area redrawn in
place, at most every REDRAW seconds whatever the number of events.

Only these escape codes are written: CSI n A (cursor up), CSI J (clear to the end of the
screen), CSI ?25l / ?25h (hide / show the cursor); colours come with the lines. The callers
hold one lock around every call (the jobs' threads and the ticker's)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TextIO

REDRAW = 0.1  # seconds: at most ten frames a second
HIDE_CURSOR = "\033[?25l"
SHOW_CURSOR = "\033[?25h"


class Screen:
    """What of the area is on the terminal, and the text that replaces it."""

    def __init__(self) -> None:
        self.rows = 0  # rows of the area drawn, the cursor at the start of the row below
        self.hidden = False

    def frame(self, above: list[str], area: list[str]) -> str:
        """Erase the area, print `above` (they scroll and stay), draw `area` under them."""
        out = [self._erase()]
        if area and not self.hidden:
            out.append(HIDE_CURSOR)
            self.hidden = True
        out.extend(line + "\n" for line in above)
        out.extend(line + "\n" for line in area)
        self.rows = len(area)
        return "".join(out)

    def clear(self) -> str:
        """Erase the area and give the cursor back."""
        out = self._erase()
        if self.hidden:
            out += SHOW_CURSOR
            self.hidden = False
        self.rows = 0
        return out

    def _erase(self) -> str:
        return f"\r\033[{self.rows}A\033[J" if self.rows else ""


class Frames:
    """Lines printed above an area that `area(now)` describes. While the area is up, lines
    wait for the next frame, drawn when REDRAW seconds have passed since the last one (or
    at once when forced); a frame that would change nothing is not written."""

    def __init__(
        self, stream: TextIO, clock: Callable[[], float], area: Callable[[float], list[str]]
    ) -> None:
        self.stream = stream
        self.clock = clock
        self.area = area
        self.screen = Screen()
        self.up = False  # the area is shown, from start() to end()
        self.pending: list[str] = []
        self.changed = False  # something happened since the last frame
        self.drawn_at = -REDRAW
        self.drawn: list[str] = []

    def start(self) -> None:
        self.up = True

    def print(self, lines: list[str], *, force: bool = False) -> None:
        if not self.up:
            self._write("".join(line + "\n" for line in lines))
            return
        self.pending.extend(lines)
        self.changed = True
        self.draw(force=force)

    def draw(self, *, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self.drawn_at < REDRAW:
            return
        self.drawn_at = now
        area = self.area(now)
        if self.pending or area != self.drawn:
            self._write(self.screen.frame(self.pending, area))
            self.pending, self.drawn = [], area
        self.changed = False

    def tick(self) -> None:
        """Between events: draw what changed, and the jobs' times once a second."""
        if self.up and (self.changed or int(self.clock()) != int(self.drawn_at)):
            self.draw()

    def end(self, after: list[str]) -> None:
        """The area goes (what waited is printed first), the cursor comes back, `after`
        is printed."""
        text = self.screen.frame(self.pending, []) + self.screen.clear()
        self.up, self.pending, self.drawn = False, [], []
        self.drawn_at = -REDRAW
        self._write(text + "".join(line + "\n" for line in after))

    def _write(self, text: str) -> None:
        if text:
            self.stream.write(text)
            self.stream.flush()


class Ticker:
    """A thread that calls `tick` every REDRAW seconds until stopped."""

    def __init__(self, tick: Callable[[], None]) -> None:
        self.tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="claw-progress", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Called without the lock that `tick` takes: the thread may be waiting for it."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def _run(self) -> None:
        while not self._stop.wait(REDRAW):
            self.tick()

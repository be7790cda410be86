"""Text from outside (a transcript, a dropped file's name, a verdict) as a terminal shows it.

A terminal obeys the control characters in what it prints: ESC starts a sequence that can
write the clipboard (OSC 52), set the window title (OSC 0) or clear the screen (CSI 2J), a
C1 character (U+0080–U+009F) is the same in one code point on some terminals, a carriage
return or backspace writes over what a person should read. Each of them is written as
`\\x1b` instead, visible and inert; line breaks and tabs stay. claw's own colour codes are
added after this, never passed through it."""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` with every control character but `\\n` and `\\t` written as `\\xNN`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


_UNESCAPED = re.compile("[\x7f-\x9f]")


def in_json(text: str) -> str:
    """JSON written with `ensure_ascii=False`, with DEL and the C1 controls it leaves raw
    written as `\\u009b` (the C0 ones it escapes itself; these occur only inside strings)."""
    return _UNESCAPED.sub(lambda m: f"\\u{ord(m[0]):04x}", text)

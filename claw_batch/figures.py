"""Numbers as a person reads them: tokens, dollars, durations, axis steps."""

from __future__ import annotations

import math


def tokens(n: int) -> str:
    return f"{n:,}"


def count(n: int, word: str, plural: str = "") -> str:
    """`1 job`, `2 jobs`, `1,200 tokens`: a count in words, singular only for exactly one."""
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def short(n: float) -> str:
    """An axis label: 950, 12k, 1.5M."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.3g}{suffix}"
    return f"{n:.3g}"


def usd(amount: float) -> str:
    """Cents for dollars, four decimals for fractions of a cent's worth."""
    if amount == 0:
        return "$0"
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


def usd_axis(amount: float) -> str:
    return "$0" if amount == 0 else f"${amount:.3g}"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def nice_step(value: float) -> float:
    """The smallest round step (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) that
    is at least `value`: an axis's gridlines fall on numbers a person reads at a glance."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10.0 * power

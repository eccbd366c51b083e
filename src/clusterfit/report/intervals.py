"""A predicted figure with its prediction interval, as table cells show it: ``28.1 ms (24-33)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..schema import Interval, IntervalsUsed

#: The footnote under a table whose figures carry intervals.
NOTE = "(lo-hi): 80% prediction interval from grouped cross-validation residuals (clusterfit.intervals)"


def with_interval(value: float, interval: Interval | None, scale: float = 1.0, digits: int = 1,
                  unit: str = "") -> str:
    """``value x scale`` with ``digits`` decimals (thousands separated), the unit, and the interval's bounds in
    parentheses with one decimal fewer (``28.1 ms (24-33)``); just the value when there is no interval."""
    text = f"{value * scale:,.{digits}f}" + (f" {unit}" if unit else "")
    if interval is None:
        return text
    d = max(digits - 1, 0)
    return f"{text} ({interval.lo * scale:,.{d}f}-{interval.hi * scale:,.{d}f})"


def basis_note(used: IntervalsUsed | None) -> str:
    """The footnote and which residual family each regime's intervals came from (key, fallback level, n)."""
    if used is None:
        return ""
    parts = [f"{regime}: {b.key} ({b.level}, n={b.n})" for regime, b in used.by_regime.items()]
    return f"{NOTE}; " + "; ".join(parts)

"""Shared by the bench's scripts: number formatting for bench/report.py's sections (values, ratios to the best
row, median [min – max]) and the progress line every script prints."""
from __future__ import annotations

from typing import List, Optional


def fmt(v: Optional[float], digits: int = 2) -> str:
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def with_ratio(v: Optional[float], best: Optional[float], digits: int = 2) -> str:
    if v is None:
        return "–"
    if not best:
        return fmt(v, digits)
    r = v / best
    cell = f"{fmt(v, digits)} (×{r:.1f})"
    return f"**{cell}**" if r < 1.005 else cell


def fmt_range(vals: List[float], fmt: str = "×%.2f") -> str:
    if not vals:
        return "not measured"
    med = sorted(vals)[len(vals) // 2] if len(vals) % 2 else 0.5 * sum(sorted(vals)[len(vals) // 2 - 1:len(vals) // 2 + 1])
    if len(vals) == 1:
        return fmt % med
    return (fmt % med) + " [" + (fmt % min(vals)) + " – " + (fmt % max(vals)) + "]"


def log(msg: str) -> None:
    """One progress line, flushed at once (the runs take minutes)."""
    print(msg, flush=True)

"""Number formatting for the panes: fixed widths, units always shown, unknown is a dash."""

from __future__ import annotations

from typing import Optional

DASH = "—"
GIB = 1024**3


def num(v: Optional[float], digits: int = 0, unit: str = "") -> str:
    if v is None:
        return DASH
    text = f"{v:,.{digits}f}"
    return f"{text} {unit}" if unit else text


def gib(v: Optional[float], digits: int = 1) -> str:
    return DASH if v is None else f"{v / GIB:.{digits}f}"


def pct(v: Optional[float], digits: int = 1) -> str:
    """A 0..1 share as a percentage."""
    return DASH if v is None else f"{v * 100:.{digits}f}%"


def secs(v: Optional[float]) -> str:
    """A latency: ms below one second, s with two significant decimals above, m:ss past a minute."""
    if v is None:
        return DASH
    if v < 1.0:
        return f"{v * 1000:.0f} ms"
    if v < 10:
        return f"{v:.2f} s"
    if v < 60:
        return f"{v:.1f} s"
    m, s = divmod(int(round(v)), 60)
    return f"{m}m{s:02d}s"


def duration(v: Optional[float]) -> str:
    """A wall-clock span: 45s, 4m12s, 1h02m."""
    if v is None:
        return DASH
    v = int(round(max(v, 0)))
    h, rest = divmod(v, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def tokens(v: Optional[float]) -> str:
    """Token counts compactly: 950, 12.3K, 175K, 1.2M."""
    if v is None:
        return DASH
    v = float(v)
    if abs(v) < 10_000:
        return f"{v:,.0f}"
    if abs(v) < 1_000_000:
        return f"{v / 1000:.1f}K" if abs(v) < 100_000 else f"{v / 1000:.0f}K"
    return f"{v / 1e6:.2f}M"


def rate(v: Optional[float]) -> str:
    """tok/s: thousands separator, one decimal below 100."""
    if v is None:
        return DASH
    return f"{v:.1f}" if abs(v) < 100 else f"{v:,.0f}"


def spec_label(algorithm: Optional[str], steps: Optional[int], topk: Optional[int],
               draft: Optional[int]) -> str:
    """EAGLE 3/1/4 (steps/topk/draft tokens), the way SGLang users write it."""
    if algorithm is None:
        return "no speculation"
    parts = [DASH if x is None else str(x) for x in (steps, topk, draft)]
    if all(p == DASH for p in parts):
        return algorithm
    return f"{algorithm} {'/'.join(parts)}"


def nvml_unavailable(reason: Optional[str]) -> str:
    """'NVML unavailable: <reason>' (the collector's reason may already start with it)."""
    reason = reason or "unknown reason"
    return reason if reason.lower().startswith("nvml unavailable") else f"NVML unavailable: {reason}"

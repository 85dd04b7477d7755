"""Tolerant readers of the values in the gateway's JSON and series: a plain value, or None when it
is not one (never an exception)."""

from __future__ import annotations

import math
from typing import Any, Optional


def _int(v: Any) -> Optional[int]:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, float):
        if not math.isfinite(v) or not v.is_integer():
            return None
        v = int(v)
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            return None
    if not isinstance(v, int) or abs(v) > 2**63:
        return None
    return v


def _count(v: Any) -> Optional[int]:
    i = _int(v)
    return i if i is not None and i >= 0 else None


def _rate(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) and f >= 0 else None


def _text(v: Any, most: int = 2048) -> Optional[str]:
    return v[:most] if isinstance(v, str) and v else None

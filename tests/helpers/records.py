"""Reading back what a test recorded: a session folder's CSV rows, and how many requests overlapped."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Union


def rows(path: Union[str, Path]) -> list[dict]:
    """A CSV file's rows, each a dict keyed by the header."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def max_overlap(intervals) -> int:
    """The most (start, end) intervals open at one moment (an end at t closes before a start at t)."""
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    cur = best = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best

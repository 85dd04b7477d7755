"""The SLO search: the highest level (concurrency, or request rate) that still meets the SLOs.

A pure policy: given the levels run so far and whether each met the target, it names the next
level to run, or says it is done (`search_step`). The ramp asks it after every level.

- A level meets the target when the Wilson lower 95 % bound of its attainment (slo_met of slo_n
  requests judged, analysis/levels.py) is >= `target` (`level_meets`); a level with no request
  judged, or cut short by over-saturation, does not.
- Coarse: start at `start` and double (capped at `max_level`) until a level misses the target.
- Fine: bisect between lo = the highest level that met it below the first miss, and hi = the
  lowest level that missed it, until they are one step apart (concurrency: adjacent integers;
  rates: hi - lo <= RATE_RESOLUTION x lo).
- Early stops: the start misses (no answer, "not met even at the start"); `max_level` meets it
  (the answer is max_level, the bracket open above it); MAX_SEARCH_LEVELS levels run.
The answer is lo: the bracket [lo, hi) holds the true limit when attainment falls with load.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from specmon.analysis.stats import wilson_lower
from specmon.model import LevelResult, SearchSummary, offered_key, offered_label

RATE_RESOLUTION = 0.1  # a rate search stops when its bracket is within 10 % of its lower end
MAX_SEARCH_LEVELS = 40


def level_meets(r: LevelResult, target: float) -> bool:
    """Whether a level met the SLO target: Wilson lower 95% bound of its attainment >= target."""
    if r.knee == "over_saturation" or not r.slo_n or r.slo_met is None:
        return False
    lo = wilson_lower(r.slo_met, r.slo_n)
    return lo is not None and lo >= target


def search_step(tried: Sequence[tuple[float, bool]], *, start: float, max_level: float, rates: bool,
                target: float) -> tuple[Optional[float], SearchSummary]:
    """(the next level to run or None when done, the search so far). `tried`: (offered value,
    met) of the levels run, in order."""
    unit = "rate" if rates else "concurrency"
    s = SearchSummary(unit=unit, target=target, start=start, max_level=max_level,
                      tried={offered_key(x): met for x, met in tried}, levels_used=len(tried))
    if not tried:
        return _level(start, rates), s
    misses = [x for x, met in tried if not met]
    s.hi = min(misses) if misses else None
    below = [x for x, met in tried if met and (s.hi is None or x < s.hi)]
    s.lo = max(below) if below else None
    s.answer = s.lo

    def done(reason: str) -> tuple[None, SearchSummary]:
        s.done, s.reason = True, reason
        return None, s

    def at(x: float) -> str:
        return offered_label(None, x) if rates else offered_label(x)

    if len(tried) >= MAX_SEARCH_LEVELS:
        return done(f"stopped after {len(tried)} levels")
    if s.hi is None:
        if s.lo is not None and s.lo >= max_level:
            return done(f"met up to the highest level allowed ({at(max_level)}): the limit is at or above it")
        return _level(min(s.lo * 2, max_level), rates), s
    if s.lo is None:
        if s.hi <= start:
            return done(f"not met even at the start ({at(start)})")
        return _level(start, rates), s  # the start was never run below the first miss: run it
    gap = s.hi - s.lo
    if (not rates and gap <= 1) or (rates and gap <= RATE_RESOLUTION * s.lo):
        return done(f"met at {at(s.lo)}, missed at {at(s.hi)}")
    mid = _level((s.lo + s.hi) / 2, rates)
    if mid in (s.lo, s.hi) or offered_key(mid) in s.tried:
        return done(f"met at {at(s.lo)}, missed at {at(s.hi)}")
    return mid, s


def _level(x: float, rates: bool) -> float:
    """A level to run: a whole concurrency (bisection rounds down), or a rate of 3 significant
    digits (labels stay short)."""
    if not rates:
        return float(max(int(math.floor(x)), 1))
    digits = 3 - int(math.floor(math.log10(abs(x)))) - 1
    return round(x, digits)


def search_words(s: SearchSummary) -> str:
    """One line: 'SLO search: C=12 (met at C=12, missed at C=13; 6 levels)'."""
    rates = s.unit == "rate"

    def at(x: Optional[float]) -> str:
        if x is None:
            return "?"
        return offered_label(None, x) if rates else offered_label(x)

    if not s.done:
        head = f"SLO search: between {at(s.lo)} and {at(s.hi)}" if s.hi is not None else (
            f"SLO search: met up to {at(s.lo)} so far" if s.lo is not None else "SLO search: started")
        return f"{head} ({s.levels_used} levels so far)"
    answer = "none" if s.answer is None else at(s.answer)
    bracket = f"[{at(s.lo)}, {at(s.hi)})" if s.hi is not None and s.lo is not None else ""
    return (f"SLO search: {answer} at attainment lower bound >= {s.target:.0%}"
            + (f", bracket {bracket}" if bracket else "") + f"; {s.levels_used} level{'' if s.levels_used == 1 else 's'} ({s.reason})")

"""The bounds every number of a plan or a flag is held to, and the checks that hold them.

Plain functions, so the command line can use them as argparse types and the plan (plan.py) as
its checks. Each raises ValueError with the words after "FLAG: " or "file: key: ".
"""

import math
from typing import Any, Optional

MAX_LEVEL = 100_000  # offered concurrency of one level: streams per arm
MAX_LEVEL_COUNT = 1_000  # levels in one ramp
MAX_TOKENS = 1_000_000  # prompt or output tokens of one request
MAX_REQUESTS_PER_LEVEL = 10_000_000
MAX_SECONDS = 30 * 86_400  # any duration: a level, a whole session, a timeout, an SLO
MAX_INTERVAL_S = 3_600.0  # between two scrapes
# The shortest interval between two scrapes: attach asks each server at most 10 times a second
# (1e-9 was taken, 114 scrapes a second at one server, each a full /metrics render).
MIN_INTERVAL_S = 0.1
MAX_SEED = 2**63
CATEGORIES = ("low_entropy", "mixed", "high_entropy")  # SPEED-Bench throughput categories
DEFAULT_LEVEL_DURATION_S = 60.0
MAX_PREFIX_GROUPS = 100_000  # system prompts of a shared-prefix workload
MAX_ZIPF = 10.0
MAX_TURNS = 100  # turns of one conversation
MAX_RATE = 100_000.0  # requests per second offered to one arm
ARRIVALS = ("poisson", "constant", "gamma")
MAX_BURSTINESS = 100.0
DEFAULT_ATTAINMENT = 0.9  # the SLO search's target (and the SLO knee's): DistServe's 90 %
DEFAULT_SEARCH_MAX_LEVEL = 1024  # concurrency; a rate search goes to its start x this at most


# --------------------------------------------------------------------------------------------
# The checks (ValueError with the words after "FLAG: " or "file: key: ")


def _number(v: Any, what: str) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected {what}, got {v!r}")
    return v


def check_levels(levels: Any) -> list[int]:
    if not isinstance(levels, (list, tuple)) or not levels or any(
            isinstance(c, bool) or not isinstance(c, int) or c <= 0 for c in levels):
        raise ValueError(f"expected a non-empty list of positive concurrency levels, got {_short(levels)}")
    if len(levels) > MAX_LEVEL_COUNT:
        raise ValueError(f"expected at most {MAX_LEVEL_COUNT:,} levels, got {len(levels):,}")
    big = next((c for c in levels if c > MAX_LEVEL), None)
    if big is not None:
        raise ValueError(f"expected concurrency levels of at most {MAX_LEVEL:,} streams per arm, got {big}")
    down = next((i for i in range(1, len(levels)) if levels[i] < levels[i - 1]), None)
    # A ramp climbs: `8,4` is a typo, and the knee calls read levels in order (a repeat, `3,3`,
    # measures the same level again and is kept).
    if down is not None:
        raise ValueError(f"expected ascending concurrency levels, got {levels[down - 1]} then {levels[down]}")
    return list(levels)


def check_tokens(n: Any) -> int:
    _number(n, "a token count")
    if not isinstance(n, int) or not 1 <= n <= MAX_TOKENS:
        raise ValueError(f"expected a token count from 1 to {MAX_TOKENS:,}, got {_short(n)}")
    return n


def check_count(n: Any, most: int = MAX_REQUESTS_PER_LEVEL) -> int:
    _number(n, "a count")
    if not isinstance(n, int) or not 1 <= n <= most:
        raise ValueError(f"expected a count from 1 to {most:,}, got {_short(n)}")
    return n


def check_seconds(s: Any, *, zero_ok: bool = False, most: float = MAX_SECONDS) -> float:
    """Finite seconds, > 0 (>= 0 with zero_ok), at most `most`: never nan or inf."""
    _number(s, "a number of seconds")
    s = float(s)
    low_ok = s >= 0 if zero_ok else s > 0
    if not math.isfinite(s) or not low_ok or s > most:
        low = ">= 0" if zero_ok else "> 0"
        raise ValueError(f"expected a finite number of seconds {low} and at most {_num(most)}, got {s!r}")
    return s


def check_interval(s: Any) -> float:
    """Seconds between scrapes: from MIN_INTERVAL_S to MAX_INTERVAL_S."""
    s = check_seconds(s, most=MAX_INTERVAL_S)
    if s < MIN_INTERVAL_S:
        raise ValueError(f"expected at least {_num(MIN_INTERVAL_S)} s between scrapes (at most "
                         f"{1 / MIN_INTERVAL_S:g} scrapes a second of each server), got {s!r}")
    return s


def check_positive(x: Any, most: float = 1e9) -> float:
    """A finite number > 0 (a speed, a price, a tok/s target)."""
    _number(x, "a number")
    x = float(x)
    if not math.isfinite(x) or not 0 < x <= most:
        raise ValueError(f"expected a finite number > 0 and at most {_num(most)}, got {x!r}")
    return x


def check_seed(seed: Any) -> int:
    _number(seed, "an integer seed")
    if not isinstance(seed, int) or not -MAX_SEED < seed < MAX_SEED:
        raise ValueError(f"expected an integer seed of at most 63 bits, got {_short(seed)}")
    return seed


def check_rates(rates: Any) -> list[float]:
    if not isinstance(rates, (list, tuple)) or not rates or any(
            isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0 for r in rates):
        raise ValueError(f"expected a non-empty list of request rates > 0 (requests per second), got {_short(rates)}")
    if len(rates) > MAX_LEVEL_COUNT:
        raise ValueError(f"expected at most {MAX_LEVEL_COUNT:,} rates, got {len(rates):,}")
    big = next((r for r in rates if r > MAX_RATE), None)
    if big is not None:
        raise ValueError(f"expected rates of at most {_num(MAX_RATE)} requests per second per arm, got {big:g}")
    return [float(r) for r in rates]


def check_arrival(arrival: Any) -> str:
    if arrival not in ARRIVALS:
        raise ValueError(f"expected {', '.join(ARRIVALS[:-1])} or {ARRIVALS[-1]}, got {_short(arrival)}")
    return arrival


def check_share(x: Any) -> float:
    """A proportion strictly between 0 and 1 (an SLO attainment target)."""
    _number(x, "a number")
    x = float(x)
    if not math.isfinite(x) or not 0 < x < 1:
        raise ValueError(f"expected a number between 0 and 1 (e.g. 0.9), got {x!r}")
    return x


def check_category(category: Optional[str]) -> Optional[str]:
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"expected {', '.join(CATEGORIES[:-1])} or {CATEGORIES[-1]}, got {category!r}")
    return category


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_zipf(v: Any) -> float:
    if not math.isfinite(v) or not 0 <= v <= MAX_ZIPF:
        raise ValueError(f"expected a Zipf exponent from 0 (uniform) to {MAX_ZIPF:g}, got {v!r}")
    return v

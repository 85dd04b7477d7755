"""The ramp plan: one validated model, whoever builds it.

`specmon ramp` builds it from its flags, a layout's `ramp:` section is validated into it, and
`specmon demo`'s overrides build a new one from the layout's (`replace_plan`). Every rule lives
here once: a plan that exists is a plan within bounds, so nothing downstream has to re-check a
level, a length or a duration (a `--levels 100000000` or an `--input-len 1e11` is one line and
exit 2 here, not memory growing until the machine kills the process).

The checks are plain functions in bounds.py (`check_levels`, `check_tokens`, `check_seconds`,
...), re-exported here: the command line uses them as argparse types for flags that are not in
the plan (`--interval`, `--duration`, `--speed`, `--isl`), so those follow the same rules with
the same words.

It is a plain dataclass validated by hand (`__post_init__`, and again on each assignment), each
value read as layouts read theirs (validation.py: lax, an integral float is an integer
`1.0e+11`, a digit string a number, `yes`/`no` a boolean); here a boolean is never a number.
A bad value raises PlanError (validation.Invalid): its `loc` (`("levels", 1)`) and its words
(`expected an integer, got 'x'`); build_plan turns it into a UsageError naming the flag or the
layout key.
"""

import dataclasses
from collections.abc import Callable
from typing import Any, Optional, Union, get_args, get_origin

from specmon.errors import UsageError
from specmon.validation import Invalid, boolean, integer, number, string, text_of, where  # noqa: F401  (where: re-exported)

from specmon.bounds import (  # noqa: F401  (re-exported: the plan's bounds and checks)
    MAX_LEVEL, MAX_LEVEL_COUNT, MAX_TOKENS, MAX_REQUESTS_PER_LEVEL, MAX_SECONDS, MAX_INTERVAL_S,
    MAX_SEED, CATEGORIES, DEFAULT_LEVEL_DURATION_S, MAX_PREFIX_GROUPS, MAX_ZIPF, MAX_TURNS,
    MAX_RATE, ARRIVALS, MAX_BURSTINESS, DEFAULT_ATTAINMENT, DEFAULT_SEARCH_MAX_LEVEL,
    check_levels, check_tokens, check_count, check_seconds, check_positive, check_seed,
    check_rates, check_arrival, check_share, check_category, _short, check_zipf,
)

# A plan's bad value: its loc (`("levels", 1)`) and its words (the validator's, shared with layouts).
PlanError = Invalid


# --------------------------------------------------------------------------------------------
# The plan

# Each bounded field's check, after the value has its type (None, where the field allows it, is
# left alone: unset). Numbers refuse booleans before that (lax reading would take true as 1).
BOUNDS: dict[str, Callable[[Any], Any]] = {
    "input_len": check_tokens, "output_len": check_tokens, "shared_prefix_len": check_tokens,
    "prefix_groups": lambda v: check_count(v, MAX_PREFIX_GROUPS),
    "turns": lambda v: check_count(v, MAX_TURNS),
    "max_concurrency": lambda v: check_count(v, MAX_LEVEL),
    "zipf": check_zipf,
    "burstiness": lambda v: check_positive(v, most=MAX_BURSTINESS),
    "think_time_s": lambda v: check_seconds(v, zero_ok=True),
    "settle_s": lambda v: check_seconds(v, zero_ok=True),
    "level_duration_s": check_seconds, "timeout_s": check_seconds,
    "slo_ttft_s": check_seconds, "slo_tpot_s": check_seconds,
    "attainment": check_share,
    "max_level": lambda v: check_positive(v, most=max(MAX_LEVEL, MAX_RATE)),
    "seed": check_seed,
    "requests_per_level": check_count,
    "trace_speed": lambda v: check_positive(v, most=1e6),
}


@dataclasses.dataclass
class RampPlan:
    """What a ramp does: offered concurrency levels (or request rates, or an SLO search), request
    shape, level length, SLOs."""

    # Closed-loop levels: C streams per arm each. Exactly one of levels and rates, unless `search`
    # (then levels or rates, when given, say where it starts; without either it searches C from 1).
    levels: Optional[list[int]] = None
    input_len: int = 1024
    output_len: int = 256
    # One of the two ends a level; neither given: DEFAULT_LEVEL_DURATION_S.
    level_duration_s: Optional[float] = None
    requests_per_level: Optional[int] = None
    settle_s: float = 5.0  # the start of a level left out of its statistics
    seed: int = 42
    dataset: Optional[str] = None
    category: Optional[str] = None  # SPEED-Bench category kept from the dataset
    tokenizer: Optional[str] = None
    flush_cache: bool = False
    restart_between_levels: bool = False
    timeout_s: float = 600.0
    # Optional operator SLOs: a request meets them when its TTFT <= slo_ttft_s and its TPOT <=
    # slo_tpot_s (either may be None: not judged). None for both: no SLO knee.
    slo_ttft_s: Optional[float] = None
    slo_tpot_s: Optional[float] = None
    # Shared prefixes (load/workload.py): the first shared_prefix_len tokens of every prompt are
    # one of prefix_groups system prompts, picked with Zipf(zipf) popularity (1 when not given).
    shared_prefix_len: Optional[int] = None
    prefix_groups: int = 1
    zipf: Optional[float] = None
    # Multi-turn conversations: each turn resends the history plus a new user message; a stream
    # waits think_time_s (the arm's seconds) between two turns of a conversation.
    turns: int = 1
    think_time_s: float = 0.0
    # Open-loop levels: each level offers `rates[i]` requests per second per arm (the arm's
    # seconds), arrival times seeded: poisson, constant or gamma (shape = burstiness: 1 is
    # Poisson, below 1 burstier); max_concurrency caps the requests in flight (None: no cap).
    rates: Optional[list[float]] = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: Optional[int] = None
    # SLO search (analysis/search.py): the highest level whose attainment's Wilson lower 95% bound
    # is >= attainment, by doubling then bisection, up to max_level. `attainment` is also the
    # SLO knee's target.
    search: bool = False
    attainment: float = DEFAULT_ATTAINMENT
    max_level: Optional[float] = None
    # A trace replayed as one open-loop level (load/trace.py): a file or `diurnal[:PEAK[:PERIOD]]`;
    # its arrival times are divided by trace_speed. `rates` then holds the one rate the trace
    # offers on average (set from the trace by whoever reads it: levels.csv's offered_rate).
    trace: Optional[str] = None
    trace_speed: float = 1.0

    def __post_init__(self) -> None:
        for name, value in _validated(self.__dict__).items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_valid", True)

    def __setattr__(self, name: str, value: Any) -> None:
        """An assignment is validated with the whole plan (a rule may join two fields)."""
        if not self.__dict__.get("_valid"):  # __init__ setting the fields, checked after
            object.__setattr__(self, name, value)
            return
        if name not in _FIELDS:
            raise PlanError((name,), "unknown key")
        values = {f: self.__dict__[f] for f in _FIELDS}
        values[name] = value
        for k, v in _validated(values).items():
            object.__setattr__(self, k, v)

    def _check_steps(self) -> None:
        if self.trace is not None:
            self._check_trace()
        elif self.trace_speed != 1.0:
            raise _at("trace_speed", "only with trace")
        if self.levels is not None and self.rates is not None:
            raise _at("rates", "expected levels (closed loop) or rates (open loop), not both")
        if not self.search and self.levels is None and self.rates is None:
            raise _at("levels", "no levels given: expected levels (e.g. 8,16,32), rates (open loop) or search")
        open_only = [(name, bad) for name, bad in (("max_concurrency", self.max_concurrency is not None),
                                                   ("arrival", self.arrival != "poisson"),
                                                   ("burstiness", self.burstiness != 1.0)) if bad]
        if self.rates is None and open_only:
            raise _at(open_only[0][0], "only with rates (open-loop levels)")
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise _at("burstiness", "only with arrival gamma (its shape; poisson is gamma with 1)")
        if self.search:
            if self.slo_ttft_s is None and self.slo_tpot_s is None:
                raise _at("search", "needs an SLO to search for (slo_ttft_s and/or slo_tpot_s)")
            start = self.search_start
            if self.max_level is not None:
                if self.rates is None and not float(self.max_level).is_integer():
                    raise _at("max_level", f"expected a whole concurrency, got {self.max_level:g}")
                if self.max_level < start:
                    raise _at("max_level", f"expected at least the search's start {start:g}, "
                                                      f"got {self.max_level:g}")
                if self.rates is None and self.max_level > MAX_LEVEL:
                    raise _at("max_level", f"expected at most {MAX_LEVEL:,} streams per arm, "
                                                      f"got {self.max_level:g}")
        elif self.max_level is not None:
            raise _at("max_level", "only with search")

    def _check_trace(self) -> None:
        """A trace is its own schedule and lengths: one rate (its mean, from the trace), no levels,
        search, conversations, dataset or tokenizer (its prompts are input_ids of exact lengths)."""
        if not self.trace.strip() or "\x00" in self.trace:
            raise _at("trace", f"expected a trace file or diurnal[:PEAK_RPS[:PERIOD_S]], got {self.trace!r}")
        for name, bad in (("levels", self.levels is not None), ("search", self.search),
                          ("turns", self.turns > 1), ("dataset", self.dataset is not None),
                          ("tokenizer", self.tokenizer is not None), ("arrival", self.arrival != "poisson"),
                          ("burstiness", self.burstiness != 1.0)):
            if bad:
                raise _at(name, "not with trace (the trace sets when each request arrives and its lengths)")
        if self.rates is None or len(self.rates) != 1:
            raise _at("rates", "with trace: the one rate the trace offers (set from the trace)")

    def _check_workload(self) -> None:
        if self.shared_prefix_len is not None:
            if self.dataset is not None or self.tokenizer is not None:
                raise _at("shared_prefix_len", "shared prefixes are built as input_ids (not with "
                                                          "dataset or tokenizer)")
            if self.shared_prefix_len >= self.input_len:
                raise _at("shared_prefix_len", f"expected fewer tokens than input_len "
                                                          f"{self.input_len}, got {self.shared_prefix_len}")
        else:
            if self.prefix_groups != 1:
                raise _at("prefix_groups", "only with shared_prefix_len")
            if self.zipf is not None:
                raise _at("zipf", "only with shared_prefix_len")
        if self.turns > 1:
            if self.rates is not None:
                raise _at("turns", "multi-turn conversations run in closed-loop levels; "
                                              "with rates each arrival is one request")
            own = self.input_len - (self.shared_prefix_len or 0)
            longest = self.input_len + (self.turns - 1) * (self.output_len + own)
            if self.dataset is None and longest > MAX_TOKENS:
                raise _at("turns", f"turn {self.turns} would send {longest:,} prompt tokens, more than "
                                              f"{MAX_TOKENS:,}")
        elif self.think_time_s:
            raise _at("think_time_s", "only with turns > 1 (the wait between two turns)")

    # ---- what the plan says, derived ------------------------------------------------------------
    @property
    def open_loop(self) -> bool:
        """Levels offer request rates (open loop), not concurrency."""
        return self.rates is not None

    @property
    def steps(self) -> list:
        """The planned levels' offered values (concurrency or rates); [] for a search, whose
        levels are chosen as it goes."""
        if self.search:
            return []
        return list(self.rates if self.rates is not None else self.levels)

    @property
    def search_start(self) -> float:
        given = self.rates if self.rates is not None else self.levels
        return float(given[0]) if given else 1.0

    @property
    def search_max(self) -> float:
        if self.max_level is not None:
            return float(self.max_level)
        if self.rates is not None:
            return min(self.search_start * DEFAULT_SEARCH_MAX_LEVEL, MAX_RATE)
        return float(min(DEFAULT_SEARCH_MAX_LEVEL, MAX_LEVEL))



def _at(field: str, message: str) -> PlanError:
    """A whole-plan rule's error, at the field it names."""
    return PlanError((field,), message)


# --------------------------------------------------------------------------------------------
# Reading each value (lax, as a layout writes it), then the bounds, then the rules of the whole

_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RampPlan))
def _kind(tp: Any) -> tuple[Any, bool]:
    """A field's type as (what its value is read as, whether None is allowed)."""
    if get_origin(tp) is Union:
        args = [a for a in get_args(tp) if a is not type(None)]
        return _kind(args[0])[0], True
    return tp, False


_KINDS = {f.name: _kind(f.type) for f in dataclasses.fields(RampPlan)}


def _read(name: str, v: Any) -> Any:
    """One field's value as its type, or a PlanError at it."""
    tp, optional = _KINDS[name]
    loc = (name,)
    v = text_of(v)  # YAML's !!binary: read as its text, as pydantic did
    if v is None:
        if optional:
            return None
        raise PlanError(loc, {int: "expected an integer", float: "expected a number", bool: "expected true or false",
                              str: "expected a string"}.get(tp, "expected a value") + ", got None")
    if name in BOUNDS and isinstance(v, bool):  # a layout's `input_len: yes` is never a number
        raise PlanError(loc, f"expected a number, got {v!r}")
    if tp is int:
        return integer(v, loc)
    if tp is float:
        return number(v, loc)
    if tp is bool:
        return boolean(v, loc)
    if tp is str:
        return string(v, loc)
    if name == "rates":  # bounds.check_rates reads the list itself (in _bounded)
        if isinstance(v, (list, tuple)) and len(v) > MAX_LEVEL_COUNT:
            raise PlanError(loc, f"expected at most {MAX_LEVEL_COUNT:,} rates, got {len(v):,}")
        return v
    # levels: list[int]
    if not isinstance(v, (list, tuple)):
        raise PlanError(loc, f"expected a list, got {_short(v)}")
    if len(v) > MAX_LEVEL_COUNT:  # before reading a huge list item by item
        raise PlanError(loc, f"expected at most {MAX_LEVEL_COUNT:,} levels, got {len(v):,}")
    if any(isinstance(c, bool) for c in v):
        raise PlanError(loc, f"expected a non-empty list of positive concurrency levels, got {_short(v)}")
    return [integer(c, (name, i)) for i, c in enumerate(v)]


def _bounded(name: str, v: Any) -> Any:
    try:
        if name == "levels":
            return check_levels(v)
        if name == "rates":
            return check_rates(v)
        if name == "arrival":
            return check_arrival(v)
        if name == "category":
            return check_category(v)
        if name in ("dataset", "tokenizer"):
            if not v.strip() or "\x00" in v:
                raise ValueError(f"expected a file or folder path, got {v!r}")
            return v
        check = BOUNDS.get(name)
        return v if check is None else check(v)
    except ValueError as e:
        raise PlanError((name,), str(e)) from None


def _validated(values: dict[str, Any]) -> dict[str, Any]:
    """Every field read and bounded, in order (the first bad one raises), then the rules that
    join fields; the values to keep. `values` holds every field (a dataclass's __init__ fills
    the defaults in)."""
    out: dict[str, Any] = {}
    for name in _FIELDS:
        v = _read(name, values[name])
        out[name] = v if v is None else _bounded(name, v)
        if name == "requests_per_level" and v is not None and out.get("level_duration_s") is not None:
            raise PlanError((name,), "expected level_duration_s or requests_per_level, not both")
        if name == "category" and v is not None and out["dataset"] is None:
            raise PlanError((name,), "needs a dataset to keep the category from (a SPEED-Bench JSONL)")
    if out["level_duration_s"] is None and out["requests_per_level"] is None and out["trace"] is None:
        out["level_duration_s"] = DEFAULT_LEVEL_DURATION_S  # (a trace runs to its last arrival)
    probe = object.__new__(RampPlan)  # the rules read the values as a plan's attributes
    probe.__dict__.update(out)
    probe._check_steps()
    probe._check_workload()
    return out


# --------------------------------------------------------------------------------------------
# Building one, with errors in the caller's words

# Where a plan field comes from on the command line (the layout names its keys as they are).
FLAGS = {
    "levels": "--levels", "input_len": "--input-len", "output_len": "--output-len",
    "level_duration_s": "--level-duration", "requests_per_level": "--requests-per-level",
    "settle_s": "--settle", "seed": "--seed", "dataset": "--dataset", "category": "--category",
    "tokenizer": "--tokenizer", "flush_cache": "--flush-cache", "slo_ttft_s": "--slo-ttft",
    "slo_tpot_s": "--slo-tpot", "shared_prefix_len": "--shared-prefix-len", "prefix_groups": "--prefix-groups",
    "zipf": "--zipf", "turns": "--turns", "think_time_s": "--think-time", "rates": "--rates",
    "arrival": "--arrival", "burstiness": "--burstiness", "max_concurrency": "--max-concurrency",
    "search": "--search", "attainment": "--attainment", "max_level": "--max-level",
    "trace": "--trace", "trace_speed": "--trace-speed",
}


def flag_label(loc: tuple) -> str:
    """`("input_len",)` -> `--input-len` (a field without a flag keeps its name)."""
    name = str(loc[0]) if loc else "ramp plan"
    return FLAGS.get(name, name)


def build_plan(values: dict[str, Any], label: Callable[[tuple], str] = flag_label) -> RampPlan:
    """A RampPlan from `values`; a bad value is a UsageError `LABEL: expected ..., got ...`."""
    try:
        return plan_from(values)
    except PlanError as e:
        raise UsageError(f"{label(e.loc)}: {e.text}") from None


def plan_from(values: Any) -> RampPlan:
    """A RampPlan from a mapping (a layout's `ramp:`, the flags' values); PlanError otherwise,
    an unknown key named with the keys there are."""
    if not isinstance(values, dict):
        raise PlanError((), f"expected a mapping, got {_short(values)}")
    unknown = [k for k in values if k not in _FIELDS]  # (a YAML `null:` key is one too)
    if unknown:
        raise PlanError((str(unknown[0]),), f"unknown key (expected one of: {', '.join(_FIELDS)})")
    return RampPlan(**values)


def replace_plan(plan: RampPlan, label: Callable[[tuple], str] = flag_label, **changes: Any) -> RampPlan:
    """A new plan: `plan` with `changes`, validated as a whole again."""
    values = {name: getattr(plan, name) for name in _FIELDS}
    values.update(changes)
    return build_plan(values, label)

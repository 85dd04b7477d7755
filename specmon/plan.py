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

It is a pydantic dataclass (not a BaseModel): still a dataclass to `dataclasses.asdict`,
`dataclasses.fields` and `dataclasses.replace` (which validates again), as session/ reads it.
Assignments are validated too.
"""

from collections.abc import Callable
from typing import Any, Optional

from pydantic import ConfigDict, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.dataclasses import dataclass

from specmon.errors import UsageError

from specmon.bounds import (  # noqa: F401  (re-exported: the plan's bounds and checks)
    MAX_LEVEL, MAX_LEVEL_COUNT, MAX_TOKENS, MAX_REQUESTS_PER_LEVEL, MAX_SECONDS, MAX_INTERVAL_S,
    MAX_SEED, CATEGORIES, DEFAULT_LEVEL_DURATION_S, MAX_PREFIX_GROUPS, MAX_ZIPF, MAX_TURNS,
    MAX_RATE, ARRIVALS, MAX_BURSTINESS, DEFAULT_ATTAINMENT, DEFAULT_SEARCH_MAX_LEVEL,
    check_levels, check_tokens, check_count, check_seconds, check_positive, check_seed,
    check_rates, check_arrival, check_share, check_category, _short, check_zipf,
)


# --------------------------------------------------------------------------------------------
# The plan

# Each bounded field's check, after pydantic has its type (None, where the field allows it, is
# left alone: unset). Numbers refuse booleans before that (pydantic would read true as 1).
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
}
NUMBER_FIELDS = (*BOUNDS, "requests_per_level")


@dataclass(config=ConfigDict(extra="forbid", validate_assignment=True))
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

    @field_validator("levels", mode="before")
    @classmethod
    def _levels(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            if len(v) > MAX_LEVEL_COUNT:  # before coercing a huge list item by item
                raise ValueError(f"expected at most {MAX_LEVEL_COUNT:,} levels, got {len(v):,}")
            if any(isinstance(c, bool) for c in v):
                raise ValueError(f"expected a non-empty list of positive concurrency levels, got {_short(v)}")
        return v  # other type errors (a string, 1.5) come from pydantic, with the item's index

    @field_validator("levels")
    @classmethod
    def _levels_after(cls, v: Optional[list[int]]) -> Optional[list[int]]:
        return None if v is None else check_levels(v)

    @field_validator("rates", mode="before")
    @classmethod
    def _rates(cls, v: Any) -> Any:
        if v is not None:
            if isinstance(v, (list, tuple)) and len(v) > MAX_LEVEL_COUNT:
                raise ValueError(f"expected at most {MAX_LEVEL_COUNT:,} rates, got {len(v):,}")
            return check_rates(v)
        return v

    @field_validator("arrival")
    @classmethod
    def _arrival(cls, v: str) -> str:
        return check_arrival(v)

    @field_validator(*NUMBER_FIELDS, mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> Any:
        return _no_bool(v)

    @field_validator(*BOUNDS)
    @classmethod
    def _bounded(cls, v: Any, info: ValidationInfo) -> Any:
        return None if v is None else BOUNDS[info.field_name](v)

    @field_validator("requests_per_level")
    @classmethod
    def _requests(cls, v: Optional[int], info: ValidationInfo) -> Optional[int]:
        if v is None:
            return None
        check_count(v)
        if info.data.get("level_duration_s") is not None:
            raise ValueError("expected level_duration_s or requests_per_level, not both")
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int) -> int:
        return check_seed(v)

    @field_validator("dataset", "tokenizer")
    @classmethod
    def _path(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (not v.strip() or "\x00" in v):
            raise ValueError(f"expected a file or folder path, got {v!r}")
        return v

    @field_validator("category")
    @classmethod
    def _category(cls, v: Optional[str], info: ValidationInfo) -> Optional[str]:
        check_category(v)
        if v is not None and "dataset" in info.data and info.data["dataset"] is None:
            raise ValueError("needs a dataset to keep the category from (a SPEED-Bench JSONL)")
        return v

    @model_validator(mode="after")
    def _default_length(self) -> "RampPlan":
        if self.level_duration_s is not None and self.requests_per_level is not None:  # an assignment
            raise ValueError("expected level_duration_s or requests_per_level, not both")
        if self.level_duration_s is None and self.requests_per_level is None:
            # object.__setattr__: a plain assignment would validate the whole plan again, in a loop
            object.__setattr__(self, "level_duration_s", DEFAULT_LEVEL_DURATION_S)
        self._check_steps()
        self._check_workload()
        return self

    def _check_steps(self) -> None:
        if self.levels is not None and self.rates is not None:
            raise ValueError(_at("rates", "expected levels (closed loop) or rates (open loop), not both"))
        if not self.search and self.levels is None and self.rates is None:
            raise ValueError(_at("levels", "required key is missing (or rates, or search)"))
        open_only = [(name, bad) for name, bad in (("max_concurrency", self.max_concurrency is not None),
                                                   ("arrival", self.arrival != "poisson"),
                                                   ("burstiness", self.burstiness != 1.0)) if bad]
        if self.rates is None and open_only:
            raise ValueError(_at(open_only[0][0], "only with rates (open-loop levels)"))
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise ValueError(_at("burstiness", "only with arrival gamma (its shape; poisson is gamma with 1)"))
        if self.search:
            if self.slo_ttft_s is None and self.slo_tpot_s is None:
                raise ValueError(_at("search", "needs an SLO to search for (slo_ttft_s and/or slo_tpot_s)"))
            start = self.search_start
            if self.max_level is not None:
                if self.rates is None and not float(self.max_level).is_integer():
                    raise ValueError(_at("max_level", f"expected a whole concurrency, got {self.max_level:g}"))
                if self.max_level < start:
                    raise ValueError(_at("max_level", f"expected at least the search's start {start:g}, "
                                                      f"got {self.max_level:g}"))
                if self.rates is None and self.max_level > MAX_LEVEL:
                    raise ValueError(_at("max_level", f"expected at most {MAX_LEVEL:,} streams per arm, "
                                                      f"got {self.max_level:g}"))
        elif self.max_level is not None:
            raise ValueError(_at("max_level", "only with search"))

    def _check_workload(self) -> None:
        if self.shared_prefix_len is not None:
            if self.dataset is not None or self.tokenizer is not None:
                raise ValueError(_at("shared_prefix_len", "shared prefixes are built as input_ids (not with "
                                                          "dataset or tokenizer)"))
            if self.shared_prefix_len >= self.input_len:
                raise ValueError(_at("shared_prefix_len", f"expected fewer tokens than input_len "
                                                          f"{self.input_len}, got {self.shared_prefix_len}"))
        else:
            if self.prefix_groups != 1:
                raise ValueError(_at("prefix_groups", "only with shared_prefix_len"))
            if self.zipf is not None:
                raise ValueError(_at("zipf", "only with shared_prefix_len"))
        if self.turns > 1:
            if self.rates is not None:
                raise ValueError(_at("turns", "multi-turn conversations run in closed-loop levels; "
                                              "with rates each arrival is one request"))
            own = self.input_len - (self.shared_prefix_len or 0)
            longest = self.input_len + (self.turns - 1) * (self.output_len + own)
            if self.dataset is None and longest > MAX_TOKENS:
                raise ValueError(_at("turns", f"turn {self.turns} would send {longest:,} prompt tokens, more than "
                                              f"{MAX_TOKENS:,}"))
        elif self.think_time_s:
            raise ValueError(_at("think_time_s", "only with turns > 1 (the wait between two turns)"))

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


def _at(field: str, message: str) -> str:
    """A whole-plan rule's message, `field: message` (build_plan puts it at that field)."""
    return f"{field}: {message}"


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):  # pydantic reads true as 1: never what a `input_len: yes` meant
        raise ValueError(f"expected a number, got {v!r}")
    return v


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
}


def flag_label(loc: tuple) -> str:
    """`("input_len",)` -> `--input-len` (a field without a flag keeps its name)."""
    name = str(loc[0]) if loc else "ramp plan"
    return FLAGS.get(name, name)


def build_plan(values: dict[str, Any], label: Callable[[tuple], str] = flag_label) -> RampPlan:
    """A RampPlan from `values`; a bad value is a UsageError `LABEL: expected ..., got ...`."""
    try:
        return RampPlan(**values)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc, text = place_error(tuple(err.get("loc", ())), error_text(err))
        raise UsageError(f"{label(loc)}: {text}") from None


def place_error(loc: tuple, text: str) -> tuple[tuple, str]:
    """A whole-plan rule's error (`field: message`, at the plan itself) moved to its field."""
    field, sep, rest = text.partition(": ")
    fields = RampPlan.__dataclass_fields__
    if sep and field in fields and not (loc and loc[-1] in fields):
        return loc + (field,), rest
    return loc, text


def replace_plan(plan: RampPlan, label: Callable[[tuple], str] = flag_label, **changes: Any) -> RampPlan:
    """A new plan: `plan` with `changes`, validated as a whole again."""
    values = {name: getattr(plan, name) for name in plan.__dataclass_fields__}
    values.update(changes)
    return build_plan(values, label)


# pydantic error kinds -> the words a user reads (layout files use the same table)
EXPECTED = {
    "int_parsing": "expected an integer", "int_type": "expected an integer", "int_from_float": "expected an integer",
    "float_parsing": "expected a number", "float_type": "expected a number",
    "bool_parsing": "expected true or false", "bool_type": "expected true or false",
    "string_type": "expected a string", "list_type": "expected a list", "dict_type": "expected a mapping",
    "model_type": "expected a mapping", "model_attributes_type": "expected a mapping",
    "dataclass_type": "expected a mapping", "dataclass_args_type": "expected a mapping",
    "missing": "required key is missing", "missing_argument": "required key is missing",
    "finite_number": "expected a finite number",
}


def error_text(err: dict) -> str:
    """One pydantic error as `expected ..., got ...` (no location)."""
    kind, value = err.get("type", ""), err.get("input")
    if kind == "value_error":
        return str(err.get("msg", "")).removeprefix("Value error, ")
    if kind in ("missing", "missing_argument"):
        return EXPECTED[kind]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return "unknown key"
    expected = EXPECTED.get(kind)
    if expected is None:
        ctx = err.get("ctx") or {}
        bounds = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
                  "less_than_equal": "<= {le}"}
        if kind in bounds:
            expected = "expected a value " + bounds[kind].format(**ctx)
        else:
            expected = "expected " + str(err.get("msg", "a valid value")).lower().removeprefix("input should be ")
    return f"{expected}, got {_short(value)}"

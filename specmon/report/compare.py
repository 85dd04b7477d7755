"""Repeat runs and drafter comparisons: telling "no difference" from noise (field notes C).

Arms with the same name and the same server settings in several sessions are repeat runs of
one configuration. Per offered
concurrency each metric gets its mean and its spread (min-max over the runs). Two configurations
differ beyond noise at a level only when their min-max ranges do not overlap; with one run each
the spread is unknown and the report says so rather than guessing.

Arms that differ only in their drafter (the same model, weights, KV dtype, memory settings and
TP size; the speculative_* settings differ) are compared level by level: throughput ratio against
the arm without speculation, or against the first arm of the group when every arm speculates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from specmon.model import LevelResult
from specmon.report.data import ReportArm

# The settings that make two arms "the same server" apart from the drafter. The request cap and
# the pool SGLang allocated are left out: both follow from the drafter (its own KV, its graphs).
SAME_SERVER_KEYS = ("model", "quantization", "kv_cache_dtype", "mem_fraction_static", "max_total_tokens", "tp_size")


@dataclass
class Spread:
    n: int
    mean: float
    lo: float
    hi: float

    def overlaps(self, other: "Spread") -> bool:
        return self.lo <= other.hi and other.lo <= self.hi


def spread(values: Sequence[Optional[float]]) -> Optional[Spread]:
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    return Spread(len(xs), sum(xs) / len(xs), min(xs), max(xs))


@dataclass
class ArmGroup:
    """One configuration (an arm name) and its runs, one per session it appears in."""

    name: str
    runs: list[ReportArm]

    def concurrencies(self) -> list[int]:
        return sorted({lv.offered_concurrency for r in self.runs for lv in r.levels})

    def at(self, c: int, metric: Callable[[LevelResult], Optional[float]]) -> Optional[Spread]:
        return spread([metric(lv) for r in self.runs for lv in r.levels if lv.offered_concurrency == c])

    @property
    def server_args(self) -> dict:
        return self.runs[0].server_args


def groups(arms: Sequence[ReportArm]) -> list[ArmGroup]:
    """Runs of one configuration: the same arm name, the same server settings *and* the same
    workload (lengths, dataset, category, arrival). Two sessions that reuse a name for different
    settings (MTP on in one, off in the other) or a different workload (8,800/1,024 tokens in one,
    2,048/256 in the other) are two configurations, named with their sessions."""
    out: dict[tuple, ArmGroup] = {}
    for a in arms:
        key = (a.name, _server_key(a.server_args), _drafter(a.server_args), a.workload)
        out.setdefault(key, ArmGroup(a.name, [])).runs.append(a)
    gs = list(out.values())
    names = [g.name for g in gs]
    for g in gs:
        if names.count(g.name) > 1:
            g.name = f"{g.name} [{', '.join(r.session for r in g.runs)}]"
    return gs


@dataclass
class DrafterRow:
    concurrency: int
    base: Spread
    other: Spread
    ratio: float
    verdict: str
    accept: Optional[Spread]


@dataclass
class DrafterComparison:
    base: str
    other: str
    base_reason: str  # "no speculation" | "first arm"
    rows: list[DrafterRow]


def _server_key(args: dict) -> Optional[tuple]:
    if not args or args.get("model") is None:
        return None  # unknown server: never call two unknowns "the same"
    return tuple(args.get(k) for k in SAME_SERVER_KEYS)


def _drafter(args: dict) -> tuple:
    return tuple(v for k, v in sorted(args.items()) if k.startswith("speculative_"))


def drafter_comparisons(gs: Sequence[ArmGroup]) -> list[DrafterComparison]:
    by_server: dict[tuple, list[ArmGroup]] = {}
    for g in gs:
        key = _server_key(g.server_args)
        if key is not None:
            by_server.setdefault(key, []).append(g)
    out = []
    for members in by_server.values():
        if len(members) < 2:
            continue
        nospec = [g for g in members if g.server_args.get("speculative_algorithm") is None]
        base = nospec[0] if nospec else members[0]
        reason = "no speculation" if nospec else "first arm"
        for g in members:
            if g is base or _drafter(g.server_args) == _drafter(base.server_args):
                continue
            out.append(DrafterComparison(base.name, g.name, reason, _rows(base, g)))
    return out


def _rows(base: ArmGroup, other: ArmGroup) -> list[DrafterRow]:
    rows = []
    for c in sorted(set(base.concurrencies()) & set(other.concurrencies())):
        b = base.at(c, lambda lv: lv.output_tok_s)
        o = other.at(c, lambda lv: lv.output_tok_s)
        if b is None or o is None or b.mean <= 0:
            continue
        rows.append(DrafterRow(c, b, o, o.mean / b.mean, verdict(b, o), other.at(c, lambda lv: lv.accept_length)))
    return rows


def verdict(base: Spread, other: Spread) -> str:
    if base.n < 2 or other.n < 2:
        return "single run: spread unknown"
    if base.overlaps(other):
        return "no difference beyond noise"
    return "higher beyond noise" if other.mean > base.mean else "lower beyond noise"

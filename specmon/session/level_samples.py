"""The running ramp level's samples, in memory, for its statistics (RampHost.samples_for).

A level's statistics read a few of a Sample's fields over the level's window: level_result
(analysis/levels.py) up, running_reqs, queued_reqs, kv_usage, accept_length, spec_enabled,
queue_time_p50_s, queue_time_mean_s; a gateway's workers (analysis/fleet_levels.py worker_level
and fleet_samples) those and ts, arm, state, kv_used_tokens, kv_capacity_tokens, gen_tok_s and
the TTFT figures. LevelSamples keeps exactly those, per arm, a row per tick in typed arrays:
ROW_BYTES (120) a row where the whole Sample was about 2 KB. `samples` gives them back as Samples with
only those fields set, so the statistics computed from them are those of the full Samples.
Not kept: the words (reason: no statistic reads them; a fleet's down tick names the worker's
state instead), the source and every figure no statistic reads.

Nothing is read back from the session's folder: samples.csv is the record, not the level's
working memory, so a level of any length needs no folder at all, and a ramp's folder may rotate.

Bounded by KEPT_BYTES across arms: at 1 s a tick, some 48 hours of one arm, 45 minutes of 64
(the ring of whole Samples this replaced held 3 hours of one arm, under 3 minutes of 64). A
level that outgrows it is thinned, never cut: every other tick of the level so far is let go,
and from then on every other tick is kept (then one in four, ...). The same ticks for every arm,
so a fleet's workers still sum tick by tick. What is left is a systematic sample of the level's
ticks: the means, shares and medians the statistics take are estimated from it, on many
thousands of ticks still, without bias unless the load cycles in step with the kept ticks; a
peak (kv_usage_max) may fall between two of them.
"""

from __future__ import annotations

from array import array
from operator import attrgetter
from typing import Optional

from specmon.model import Sample

KEPT_BYTES = 20 * 1024 * 1024

# The counts come back as ints, the figures as floats (a double holds any count below 2**53 exactly).
COUNTS = ("running_reqs", "queued_reqs", "kv_used_tokens", "kv_capacity_tokens")
FIGURES = ("kv_usage", "gen_tok_s", "accept_length", "queue_time_p50_s", "queue_time_mean_s",
           "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_mean_s")
NUMBERS = COUNTS + FIGURES
# Every field of a Sample that LevelSamples gives back (the rest keep their defaults).
KEPT_FIELDS = ("ts", "arm", "up", "state", "spec_enabled") + NUMBERS

# tick (I) + ts (d) + up and spec_enabled (B) + state (B) + which numbers are unknown (H) + the numbers (d)
ROW_BYTES = 4 + 8 + 1 + 1 + 2 + 8 * len(NUMBERS)

_UP, _SPEC_KNOWN, _SPEC_ON = 1, 2, 4
_STATES = ("up", "starting", "down", "refused", "timeout", "unauthorized", "error", "failed", "stale")  # Sample.state
_BIG = float(2 ** 53)
_numbers_of = attrgetter(*NUMBERS)


class _Rows:
    """One arm's rows, a column per field."""

    __slots__ = ("tick", "ts", "flags", "state", "unknown", "numbers")

    def __init__(self) -> None:
        self.tick = array("I")
        self.ts = array("d")
        self.flags = array("B")
        self.state = array("B")
        self.unknown = array("H")  # bit j: NUMBERS[j] was None
        self.numbers = [array("d") for _ in NUMBERS]

    def columns(self) -> list[array]:
        return [self.tick, self.ts, self.flags, self.state, self.unknown, *self.numbers]

    def keep_only(self, stride: int) -> None:
        """Let go of the rows whose tick is not a multiple of stride."""
        keep = [i for i, t in enumerate(self.tick) if t % stride == 0]
        for col in self.columns():
            col[:] = array(col.typecode, [col[i] for i in keep])


class LevelSamples:
    """One ramp level's samples, every arm's (module doc). A new level starts a new one."""

    def __init__(self, budget_bytes: Optional[int] = None) -> None:
        self.max_rows = max(1, (KEPT_BYTES if budget_bytes is None else budget_bytes) // ROW_BYTES)
        self.stride = 1  # one tick in `stride` kept (1 until the level outgrows max_rows)
        self.rows = 0  # across arms
        self._arms: dict[str, _Rows] = {}
        self._tick = -1  # the level's ticks so far, numbered from 0 by their stamps
        self._tick_ts: Optional[float] = None
        self._state_names = list(_STATES)
        self._states = {name: i for i, name in enumerate(_STATES)}

    def add(self, arm: str, s: Sample) -> None:
        """arm's sample s, of the tick its stamp says (every arm's sample of one tick has the tick's stamp)."""
        if s.ts != self._tick_ts:
            self._tick, self._tick_ts = self._tick + 1, s.ts
        if self._tick % self.stride:
            return
        unknown, values = 0, []
        for j, v in enumerate(_numbers_of(s)):
            if v.__class__ is not float:
                v = _number(v)
                if v is None:
                    unknown |= 1 << j
                    v = 0.0
            values.append(v)
        spec = s.spec_enabled
        flags = (_UP if s.up else 0) | (0 if spec is None else _SPEC_KNOWN | (_SPEC_ON if spec else 0))
        rows = self._arms.get(arm)
        if rows is None:
            rows = self._arms[arm] = _Rows()
        rows.tick.append(self._tick)
        rows.ts.append(s.ts)
        rows.flags.append(flags)
        rows.state.append(self._state_code(s.state))
        rows.unknown.append(unknown)
        for col, v in zip(rows.numbers, values):
            col.append(v)
        self.rows += 1
        if self.rows > self.max_rows:
            self._thin()

    def samples(self, arm: str, t0: float, t1: float) -> list[Sample]:
        """arm's kept samples stamped within [t0, t1], in order, as Samples with KEPT_FIELDS set."""
        rows = self._arms.get(arm)
        if rows is None:
            return []
        out = []
        n_counts = len(COUNTS)
        for i, ts in enumerate(rows.ts):
            if not t0 <= ts <= t1:
                continue
            unknown, flags = rows.unknown[i], rows.flags[i]
            numbers = {}
            for j, name in enumerate(NUMBERS):
                if unknown >> j & 1:
                    continue
                v = rows.numbers[j][i]
                numbers[name] = int(v) if j < n_counts and v.is_integer() and abs(v) < _BIG else v
            out.append(Sample(ts=ts, arm=arm, up=bool(flags & _UP), state=self._state_names[rows.state[i]],
                              spec_enabled=bool(flags & _SPEC_ON) if flags & _SPEC_KNOWN else None, **numbers))
        return out

    def drop(self, arm: str) -> None:
        """An arm that left (a fleet's worker): nothing will ask for its samples."""
        rows = self._arms.pop(arm, None)
        if rows is not None:
            self.rows -= len(rows.tick)

    def kept(self, arm: str) -> int:
        rows = self._arms.get(arm)
        return len(rows.tick) if rows is not None else 0

    def _thin(self) -> None:
        while self.rows > self.max_rows and self.stride < 2 ** 30:
            self.stride *= 2
            for rows in self._arms.values():
                rows.keep_only(self.stride)
            self.rows = sum(len(r.tick) for r in self._arms.values())

    def _state_code(self, state: str) -> int:
        code = self._states.get(state)
        if code is None:
            if len(self._state_names) >= 256:  # a byte each; states are a short list
                return self._states["error"]
            code = self._states[state] = len(self._state_names)
            self._state_names.append(state)
        return code


def _number(v: object) -> Optional[float]:
    """v as a double, None when unknown or not a number (the row stays whole either way)."""
    if v is None:
        return None
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None

"""The ramp's per-worker figures when one of its arms is a gateway (the RampDriver calls this
twice a level: when the level's window opens, and when the level has finished).

The ramp loads the gateway; the live session watches every worker behind it (RampHost.
fleet_workers). For each finished level this adds, beside the gateway's row, one row per worker
from the worker's own samples over the same window (analysis/fleet_levels.py), calls each
worker's knees on its own rows (KneeCalled with the worker as the arm, its knee row labelled as
any arm's), and keeps the fleet's summary: routing imbalance per level, the worker that saturated
first, the fleet's own knee (LevelFinished.fleets -> session.json fleet_levels). A ramp without a
gateway arm gets nothing from here.
"""

from __future__ import annotations

from typing import Optional, Sequence

from specmon.analysis.fleet_levels import fleet_levels, window_histogram, worker_level
from specmon.analysis.knee import knee_level, knees_summary, label_knee, plateau_knee, queueing_knee
from specmon.analysis.levels import Window
from specmon.model import ArmSpec, FleetLevels, KneeCalled, KneesSummary, LevelResult
from specmon.session.source import Emit, RampHost
from specmon.sources.prom import MetricsSnapshot


class FleetRamp:
    def __init__(self, arms: Sequence[ArmSpec]):
        self.arms = list(arms)
        self.rows: dict[str, list[LevelResult]] = {}  # worker arm -> its rows, level by level
        self.knees: dict[str, KneesSummary] = {}  # worker arm -> its knees so far
        self.fleets: dict[str, FleetLevels] = {}  # gateway arm -> the fleet's summary so far
        self._gateway_of: dict[str, str] = {}  # worker arm -> its gateway arm
        self._sharing: dict[tuple[str, int], int] = {}  # (worker arm, level) -> workers that shared that level
        self._roles: dict[str, Optional[str]] = {}  # worker arm -> regular | prefill | decode
        self._opened: dict[str, Optional[MetricsSnapshot]] = {}
        self._called: set[tuple[str, str]] = set()
        # Gateway arms with more than one worker: each request ran on one worker's clock, and
        # simulators' clocks are offset from one another, so the span of a level's server stamps
        # is no pace (ramp.server_pace): the workers' reported time scale stands (LiveSession.info).
        self.gateways: set[str] = set()

    def window_opened(self, live: RampHost) -> None:
        """Each worker's newest scrape as the level's window opens: the base of its histograms."""
        self._opened = {w.name: live.newest_metrics(w.name)
                        for arm in self.arms for w in live.fleet_workers(arm.name)}
        self._several(live)

    def _several(self, live: RampHost) -> None:
        self.gateways = {a.name for a in self.arms if len(live.fleet_workers(a.name)) > 1}

    def level_finished(self, i: int, c: int, window: Window, level_t0: float, results: Sequence[LevelResult],
                       knees: dict[str, KneesSummary], emit: Emit, live: RampHost,
                       ) -> tuple[list[LevelResult], dict[str, KneesSummary], dict[str, FleetLevels]]:
        """The workers' rows of level i (to go after the arms' own `results`), every worker's
        knees so far, and each gateway's summary (`knees`: the ramp's, the gateways' own among them)."""
        opened, self._opened = self._opened, {}
        self._several(live)
        if window.length <= 0:
            window = Window(level_t0, window.t1)  # a level shorter than its settle: all of it, as the ramp does
        rows: list[LevelResult] = []
        for arm in self.arms:
            workers = live.fleet_workers(arm.name)
            fleet_row = next((r for r in results if r.arm == arm.name), None)
            if not workers or fleet_row is None:
                continue
            per = {w.name: live.samples_for(w.name, window.t0, window.t1) for w in workers}
            sharing = sum(1 for ss in per.values() if any(s.up for s in ss)) or len(workers)
            for w in workers:
                info, newest = live.info(w.name), live.newest_metrics(w.name)
                r = worker_level(w.name, w.url, i, c, per[w.name], share_of=sharing,
                                 max_running=info.max_running_requests if info is not None else None,
                                 fleet_row=fleet_row,
                                 ttft_hist=window_histogram(opened.get(w.name), newest, "time_to_first_token_seconds"),
                                 queue_hist=window_histogram(opened.get(w.name), newest, "queue_time_seconds"))
                self._gateway_of[w.name] = arm.name
                self._sharing[(w.name, i)] = sharing
                self.rows.setdefault(w.name, []).append(r)
                self._call_knees(w.name, r, emit)
                rows.append(r)
            every = [r for name, rs in self.rows.items() if self._gateway_of.get(name) == arm.name for r in rs]
            mine = {n: k for n, k in self.knees.items() if self._gateway_of.get(n) == arm.name}
            self._roles.update({w.name: w.role for w in workers})
            self.fleets[arm.name] = fleet_levels(arm.name, workers[0].fleet or arm.name, every, mine,
                                                 knees.get(arm.name), roles=self._roles)
        return rows, dict(self.knees), dict(self.fleets)

    def table(self, results: dict[str, list[LevelResult]]) -> list[LevelResult]:
        """Every row of the ramp, level by level: the arms' rows, then their workers'."""
        levels = sorted({r.level for rs in list(results.values()) + list(self.rows.values()) for r in rs})
        out = []
        for lv in levels:
            out += [r for rs in results.values() for r in rs if r.level == lv]
            out += [r for rs in self.rows.values() for r in rs if r.level == lv]
        return out

    def _call_knees(self, arm: str, r: LevelResult, emit: Emit) -> None:
        """As the ramp calls an arm's knees: on the row that confirms one, once per definition.
        Only the levels since the fleet last changed count: a worker's share of C is C / N, so its
        rows on either side of a worker joining or leaving are not one curve."""
        rows = self.rows[arm]
        sharing = self._sharing[(arm, r.level)]
        start = len(rows)
        while start > 0 and self._sharing.get((arm, rows[start - 1].level)) == sharing:
            start -= 1
        levels = rows[start:]
        for k in (plateau_knee(levels), queueing_knee(levels)):
            if k.confirmed_at == r.level and (arm, k.definition) not in self._called:
                self._called.add((arm, k.definition))
                r.knee_confirmed = ";".join(x for x in (r.knee_confirmed, k.definition) if x)
                at = knee_level(levels, k)
                if at is not None:
                    labelled = label_knee(rows, arm, at, k.definition)
                    rows[next(j for j, x in enumerate(rows) if x.level == at)] = labelled
                    levels = rows[start:]
                emit(KneeCalled(arm=arm, definition=k.definition, concurrency=k.concurrency,
                                detail=f"worker {arm}, levels as the fleet's C: "
                                + k.detail.replace("5% of C", "5% of its share of C"),
                                resolved=k.values.get("resolved"),
                                knee_level=at, confirmed_level=r.level))
        self.knees[arm] = knees_summary(levels)

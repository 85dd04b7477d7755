"""Session folders read back for the report: one ReportArm per (session, arm) with its levels.

Reading goes through `load_session` (session/recorded.py, which older folders are replayed
from), so the report and the replay agree on what a folder means; this module only adds what the
report needs on top: the arm's server args, how many GPUs it ran on, and the mean GPU power of
each level.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from specmon.analysis.stats import mean
from specmon.errors import UsageError
from specmon.model import LevelResult, PredictedKnee, SearchSummary
from specmon.session.folder import SessionMeta
from specmon.session.recorded import RecordedSession, load_session

CSV_FILES = ("samples.csv", "levels.csv", "requests.csv")


@dataclass
class ReportArm:
    key: str  # "arm" for one session, "session/arm" for several
    name: str  # the arm's own name (the same name across sessions = repeat runs)
    session: str  # the session's display name
    levels: list[LevelResult]  # ordered by level index, then offered concurrency
    server_args: dict[str, Any] = field(default_factory=dict)
    time_scale: Optional[float] = None
    gpus: int = 1
    gpus_source: str = "assumed 1"  # where the GPU count came from
    power_w: dict[int, Optional[float]] = field(default_factory=dict)  # level index -> mean gpu_power_w
    power_simulated: bool = False  # power_w is the simulator's figure for the card it simulates
    predicted: Optional[PredictedKnee] = None  # as the live session called it
    slo_ttft_s: Optional[float] = None  # the ramp's SLOs (session.json ramp_plan); None: not given
    slo_tpot_s: Optional[float] = None
    attainment: float = 0.9  # the plan's SLO attainment target (ramp_plan attainment; 0.9 before it was one)
    search: Optional[SearchSummary] = None  # the SLO search as the ramp ended it (session.json knees)
    # What the ramp sent (lengths, dataset, category, arrival): repeat runs must share it.
    workload: tuple = ()

    def power_at(self, lv: LevelResult) -> Optional[float]:
        return None if lv.level is None else self.power_w.get(lv.level)


@dataclass
class ReportSession:
    name: str
    path: Path
    rec: RecordedSession

    @property
    def meta(self) -> SessionMeta:
        return self.rec.meta


def load_sessions(paths: list[Path]) -> tuple[list[ReportSession], list[ReportArm]]:
    sessions = [_load_one(Path(p)) for p in paths]
    _name_sessions(sessions)
    many = len(sessions) > 1
    arms: list[ReportArm] = []
    for s in sessions:
        for name in _arm_names(s.rec):
            arms.append(_arm(s, name, f"{s.name}/{name}" if many else name))
    return sessions, arms


def _load_one(path: Path) -> ReportSession:
    if path.is_dir():
        _check_readable(path)
    try:
        rec = load_session(path)
    except (csv.Error, UnicodeDecodeError) as e:  # _check_readable catches most; keep one line anyway
        raise UsageError(f"{path}: unreadable CSV ({e}); expected specmon session CSVs")
    if not (path / "levels.csv").exists():
        raise UsageError(f"{path / 'levels.csv'}: missing; expected a ramp session (levels.csv written by "
                         f"specmon ramp, launch or demo)")
    if not rec.levels:
        raise UsageError(f"{path / 'levels.csv'}: no level rows; expected at least one finished ramp level")
    return ReportSession(path.resolve().name, path, rec)


def _check_readable(path: Path) -> None:
    """Name the file when a CSV is not UTF-8 text or not CSV at all (load_session would not)."""
    for name in CSV_FILES:
        p = path / name
        if not p.exists():
            continue
        try:
            with open(p, newline="", encoding="utf-8") as f:
                for _ in csv.reader(f):
                    pass
        except (UnicodeDecodeError, csv.Error) as e:
            raise UsageError(f"{p}: not a UTF-8 CSV file ({e.__class__.__name__}); expected a specmon session CSV")


def _name_sessions(sessions: list[ReportSession]) -> None:
    """Folder names; the parent is added where two folders share a name."""
    names = [s.name for s in sessions]
    for s in sessions:
        if names.count(s.name) > 1:
            s.name = f"{s.path.resolve().parent.name}/{s.name}"
    seen: dict[str, int] = {}
    for s in sessions:  # the same folder given twice still gets two keys
        seen[s.name] = seen.get(s.name, 0) + 1
        if seen[s.name] > 1:
            s.name = f"{s.name}#{seen[s.name]}"


def _arm_names(rec: RecordedSession) -> list[str]:
    order = [a.name for a in rec.arms]
    for lv in rec.levels:
        if lv.arm not in order:
            order.append(lv.arm)
    with_levels = {lv.arm for lv in rec.levels}
    return [n for n in order if n in with_levels]


def _arm(s: ReportSession, name: str, key: str) -> ReportArm:
    meta = s.meta
    arm_meta = meta.arm(name)
    levels = sorted((lv for lv in s.rec.levels if lv.arm == name),
                    key=lambda lv: (lv.level if lv.level is not None else 1 << 30, lv.offered))
    server_args = dict((arm_meta.server_args if arm_meta is not None else None) or {})
    gpus, source = _gpu_count(meta, name, server_args)
    plan = meta.ramp_plan or {}
    power: dict[int, list[Optional[float]]] = {}
    simulated = False
    for smp in s.rec.samples:
        if smp.arm == name and smp.level is not None:
            power.setdefault(smp.level, []).append(smp.gpu_power_w)
            simulated = simulated or smp.gpu_source == "simulated"
    return ReportArm(
        key=key, name=name, session=s.name, levels=levels, server_args=server_args,
        time_scale=arm_meta.time_scale if arm_meta is not None else None, gpus=gpus, gpus_source=source,
        power_w={lv: mean(vals) for lv, vals in power.items()}, power_simulated=simulated,
        predicted=meta.predicted_knees.get(name),
        slo_ttft_s=_opt_float(plan.get("slo_ttft_s")), slo_tpot_s=_opt_float(plan.get("slo_tpot_s")),
        attainment=_opt_float(plan.get("attainment")) or 0.9, workload=workload_key(plan),
        search=meta.knees[name].search if name in meta.knees else None,
    )


WORKLOAD_KEYS = ("input_len", "output_len", "dataset", "category", "tokenizer", "requests_per_level",
                 "arrival", "rates", "shared_prefix_len", "prefix_groups", "turns")


def workload_key(plan: dict[str, Any]) -> tuple:
    """The ramp plan's workload settings, as a comparable key (absent settings are None)."""
    return tuple((k, str(plan.get(k))) for k in WORKLOAD_KEYS)


def _opt_float(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _gpu_count(meta: SessionMeta, name: str, server_args: dict) -> tuple[int, str]:
    """GPUs the arm ran on: the layout's `gpus:` list (launch mode) when recorded, else the server's
    tp_size when above 1 (a TP=8 server holds 8 GPUs whoever launched it), else 1."""
    layout = meta.layout or {}
    for a in layout.get("arms") or [] if isinstance(layout, dict) else []:
        if isinstance(a, dict) and a.get("name") == name:
            gpus = (a.get("launch") or {}).get("gpus") if isinstance(a.get("launch"), dict) else None
            if gpus:
                return len(gpus), "layout gpus"
    tp = server_args.get("tp_size")
    if isinstance(tp, int) and tp > 1:
        return tp, "server tp_size"
    return 1, "assumed 1"

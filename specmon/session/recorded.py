"""A session folder's CSVs and session.json read back as typed rows (RecordedSession).

What the report draws from, and what an older folder's events are rebuilt from (legacy.py).
Every rotated segment is read, oldest first; a bad cell is one clear error naming the file and
line.
"""

from __future__ import annotations

import csv
import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Optional

from specmon.errors import UsageError
from specmon.model import ArmInfo, ArmSpec, GpuProcess, GpuReading, GpuSnapshot, LevelResult, Marker, Sample
from specmon.session import codec, segments
from specmon.session.folder import SessionMeta, read_meta


def _from_row(cls: type, row: dict[str, Optional[str]], where: str) -> Any:
    try:
        return codec.from_row(cls, row)
    except codec.CellError as e:
        raise UsageError(f"{where}: {e}") from None


def _read_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    """A session CSV's rows, its rotated segments first (each has its own header)."""
    rows: list[dict[str, str]] = []
    for seg in segments.segment_paths(path):
        with segments.open_text(seg) as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise UsageError(f"{seg}: missing column(s) {', '.join(missing)}; expected a specmon session CSV")
            rows.extend(reader)
    return rows


def arm_info(args: Optional[dict], time_scale: Optional[float]) -> Optional[ArmInfo]:
    if not args:
        return None
    known = {f.name for f in dataclasses.fields(ArmInfo)}
    info = ArmInfo(**{k: v for k, v in args.items() if k in known})
    if time_scale:
        info.time_scale = float(time_scale)
    return info


@dataclasses.dataclass
class RecordedSession:
    path: Path
    meta: SessionMeta
    arms: list[ArmSpec]
    samples: list[Sample]
    markers: list[Marker]
    levels: list[LevelResult]
    request_ends: dict[tuple[str, int], list[float]]  # (arm, level) -> sorted completion times
    gpus: dict[float, GpuSnapshot] = dataclasses.field(default_factory=dict)  # tick ts -> every GPU then


def load_session(path: Path) -> RecordedSession:
    path = Path(path)
    meta = read_meta(path)

    samples: list[Sample] = []
    markers: list[Marker] = []
    rows = _read_csv(path / "samples.csv", ("ts", "arm"))
    for i, row in enumerate(rows, start=2):
        where = f"{path / 'samples.csv'}:{i}"
        if not (row.get("arm") or "").strip():
            if (row.get("marker") or "").strip():
                markers.append(Marker(label=row["marker"], ts=float(row["ts"])))
            continue
        if (row.get("dp_rank") or "").strip():
            continue  # a DP rank's row: its worker's own row is the sample
        samples.append(_from_row(Sample, row, where))

    levels = [_from_row(LevelResult, row, f"{path / 'levels.csv'}:{i}")
              for i, row in enumerate(_read_csv(path / "levels.csv", ("arm", "offered_concurrency")), start=2)]
    plan_levels = list((meta.ramp_plan or {}).get("levels") or [])
    for r in levels:  # older rows without a `level` cell: place them by their concurrency
        if r.level is None and r.offered_concurrency in plan_levels:
            r.level = plan_levels.index(r.offered_concurrency)

    # Client durations were recorded in the arm's time (x time_scale for a sped-up sim): back to wall.
    scales = {a.name: float(a.time_scale or 1.0) for a in meta.arms}
    ends: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in _read_csv(path / "requests.csv", ("arm", "level", "t_start")):
        if not (row.get("e2e_s") or "").strip():
            continue  # a request that never finished has no end
        try:
            # The wall end when recorded; older sessions only have e2e in the arm's time.
            t_end = (float(row["t_end"]) if (row.get("t_end") or "").strip()
                     else float(row["t_start"]) + float(row["e2e_s"]) / scales.get(row["arm"], 1.0))
            ends[(row["arm"], int(float(row["level"])))].append(t_end)
        except ValueError:
            continue  # a request that never finished has no end
    for v in ends.values():
        v.sort()

    arms = [ArmSpec(name=a.name, url=a.url or "", launched=a.launched) for a in meta.arms if a.name]
    for s in samples:  # arms that only appear in samples.csv
        if s.arm not in {a.name for a in arms}:
            arms.append(ArmSpec(name=s.arm, url=""))
    if not samples and not levels:
        raise UsageError(f"{path / 'samples.csv'}: no sample rows; nothing to replay")
    return RecordedSession(path, meta, arms, samples, markers, levels, dict(ends), _load_gpus(path / "gpus.csv"))


def _opt(row: dict[str, str], col: str, conv: Callable[[float], Any], where: str) -> Any:
    cell = (row.get(col) or "").strip()
    if not cell:
        return None  # refused by the driver, or unknown
    try:
        return conv(float(cell))
    except ValueError:
        raise UsageError(f"{where}: column {col!r}: expected a number, got {cell!r}")


def _load_gpus(path: Path) -> dict[float, GpuSnapshot]:
    """gpus.csv (absent in sessions recorded before it existed) back into one snapshot per tick."""
    if not segments.has_segments(path):
        return {}
    snaps: dict[float, GpuSnapshot] = {}
    for i, row in enumerate(_read_csv(path, ("ts", "gpu")), start=2):
        try:
            ts = float(row["ts"])
        except ValueError:
            raise UsageError(f"{path}:{i}: ts: expected a number, got {row['ts']!r}")
        if row.get("available") == "0":
            snaps[ts] = GpuSnapshot(ts=ts, available=False, reason=row.get("reason") or None)
            continue
        where = f"{path}:{i}"
        g = GpuReading(index=int(_opt(row, "gpu", int, where)), name=row.get("name") or None,
                       uuid=row.get("uuid") or None, mem_used_bytes=_opt(row, "mem_used_bytes", int, where),
                       mem_total_bytes=_opt(row, "mem_total_bytes", int, where),
                       util_pct=_opt(row, "util_pct", float, where), power_w=_opt(row, "power_w", float, where),
                       temp_c=_opt(row, "temp_c", float, where),
                       # a simulated arm's card (older folders: no such column, every row NVML's)
                       source=row.get("source") or "nvml", arm=row.get("arm") or None,
                       weights_bytes=_opt(row, "weights_bytes", int, where),
                       kv_pool_bytes=_opt(row, "kv_pool_bytes", int, where),
                       cuda_graph_bytes=_opt(row, "cuda_graph_bytes", int, where),
                       power_limit_w=_opt(row, "power_limit_w", float, where))
        procs = row.get("processes") or ""
        g.processes = None if not procs else [] if procs == "-" else [
            GpuProcess(pid=int(pid), name=None, used_bytes=int(used) if used else None)
            for pid, _, used in (x.partition(":") for x in procs.split(";"))]
        snaps.setdefault(ts, GpuSnapshot(ts=ts, available=True)).gpus.append(g)
    # A simulated card's row is written only when it changes: each tick gets its last one.
    last: dict[tuple, GpuReading] = {}
    for ts in sorted(snaps):
        snap = snaps[ts]
        here = {(g.arm, g.index) for g in snap.gpus if g.source == "simulated"}
        snap.gpus.extend(dataclasses.replace(g) for k, g in last.items() if k not in here)
        last.update({(g.arm, g.index): g for g in snap.gpus if g.source == "simulated"})
    return snaps

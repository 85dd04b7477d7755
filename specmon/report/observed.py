"""The report's observed-knee section: each arm's operating curve from session.json's
`observed_knees` (analysis/observed.py), as a table and a text curve, for any folder that has
them: an attach or a Prometheus history (no ramp levels needed) as well as a ramp."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from specmon.model import ObservedKnee
from specmon.report.tables import Section, Table, num
from specmon.session.folder import SessionMeta

BARS = " ▁▂▃▄▅▆▇█"


def curve_line(k: ObservedKnee) -> str:
    """tok/s by running-request bin as one row of bars, lowest count first: '0 ▁▃▅▇██ 24'."""
    pts = [p for p in k.curve if p.tok_s is not None]
    if not pts:
        return ""
    top = max(p.tok_s for p in pts) or 1.0  # type: ignore[type-var]
    bars = "".join(BARS[min(8, round(8 * p.tok_s / top))] for p in pts)  # type: ignore[operator]
    return f"{pts[0].running} {bars} {pts[-1].running} running (tok/s up to {top:.0f})"


def observed_section(name: str, meta: SessionMeta) -> Optional[Section]:
    if not meta.observed_knees:
        return None
    knees = Table(["arm", "knee (running)", "limit", "evidence s", "confidence", "plateau", "queue onset",
                   "running max", "reason"], [], title=f"{name}: observed knees")
    lines, tables = [], [knees]
    for arm, k in meta.observed_knees.items():
        knees.rows.append([arm, "" if k.concurrency is None else str(k.concurrency), k.limit or "",
                           num(k.evidence_s, "{:.0f}"), k.confidence or "",
                           "" if k.plateau is None else str(k.plateau),
                           "" if k.queue_onset is None else str(k.queue_onset),
                           "" if k.running_max is None else str(k.running_max), k.reason])
        line = curve_line(k)
        if line:
            lines.append(f"{arm}: {line}")
        tables.append(Table(
            ["running", "evidence s", "tok/s", "tok/s per request", "queued mean", "queued share %",
             "queue s", "TTFT s", "KV max %"],
            [[str(p.running) if p.width == 1 else f"{p.running}-{p.running + p.width - 1}",
              num(p.evidence_s, "{:.0f}"), num(p.tok_s, "{:.0f}"), num(p.per_user_tok_s),
              num(p.queued_mean), num(None if p.queued_share is None else 100 * p.queued_share, "{:.0f}"),
              num(p.queue_s, "{:.3f}"), num(p.ttft_s, "{:.3f}"),
              num(None if p.kv_usage_max is None else 100 * p.kv_usage_max, "{:.0f}")] for p in k.curve],
            title=f"{arm}: operating curve"))
    return Section("Observed knees (the traffic each arm served)", lines=lines, tables=tables)


def observed_only(folder: Path, meta: SessionMeta) -> bool:
    """A folder with observed knees and no finished ramp level (an attach, a history)."""
    levels = folder / "levels.csv"
    if not meta.observed_knees:
        return False
    try:
        return not levels.exists() or len(levels.read_text(encoding="utf-8").splitlines()) <= 1
    except (OSError, UnicodeDecodeError):
        return False

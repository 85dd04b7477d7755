"""The per-level table, shaped like the operators' own (docs/field-notes.md C) plus latency columns:

    C | achieved | out tok/s | per-user tok/s | TTFT p50/p99 | TPOT | accept | ok/failed | cache hit | knee

A rate level's C cell is its rate ("r=4/s"); an acceptance length read from the server's gauge
instead of the requests is marked "(server)"; cache hit is the level's prefix-cache hit rate.
"""

from __future__ import annotations

from typing import Optional, Sequence

from specmon.model import LevelResult


def _f(v: Optional[float], fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _secs(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}s" if v >= 1 else f"{v * 1000:.0f}ms"


HEADERS = ["arm", "C", "achieved", "out tok/s", "per-user tok/s", "TTFT p50/p99", "TPOT", "accept", "ok/failed",
           "cache hit", "knee"]


def level_rows(results: Sequence[LevelResult]) -> list[list[str]]:
    rows = []
    for r in results:
        knee = r.knee or ""
        if not r.valid:
            knee = (knee + " " if knee else "") + f"INVALID ({r.invalid_reason})"
        else:
            knee = " ".join(x for x in (knee, r.ttft_note, r.note) if x)
        accept = _f(r.accept_length, "{:.2f}") + (" (server)" if r.accept_length_source == "server" else "")
        rows.append([r.arm, r.label if r.offered_rate is not None else str(r.offered_concurrency),
                     _f(r.achieved_concurrency, "{:.1f}"),
                     _f(r.output_tok_s, "{:.1f}"), _f(r.per_user_tok_s, "{:.1f}"),
                     f"{_secs(r.ttft_p50_s)}/{_secs(r.ttft_p99_s)}", _secs(r.tpot_p50_s),
                     accept, f"{r.ok}/{r.failed}", _f(None if r.cache_hit_rate is None else r.cache_hit_rate * 100,
                                                       "{:.1f}%"), knee])
    return rows


def format_level_table(results: Sequence[LevelResult]) -> str:
    rows = level_rows(results)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADERS)]
    line = lambda cells: " | ".join(c.rjust(w) if i not in (0, len(HEADERS) - 1) else c.ljust(w)
                                    for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([line(HEADERS)] + [line(r) for r in rows])

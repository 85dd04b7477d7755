"""The report's figures (matplotlib, Agg backend: no display needed on a GPU host over SSH).

One colour per arm throughout; knees are black markers on the arm's curve (one shape per
definition) so the throughput and TTFT figures show where each definition called it; the knee
predicted from the KV pool is a dotted line in the arm's colour; levels flagged invalid (the client
was the bottleneck) carry a grey x.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FormatStrFormatter  # noqa: E402

from specmon.model import LevelResult  # noqa: E402
from specmon.report.data import ReportArm  # noqa: E402
from specmon.report.frontier import matched  # noqa: E402
from specmon.report.knees import arm_knees  # noqa: E402

KNEE_MARKERS = {"plateau": "o", "queueing": "s", "c_90": "D", "power": "^"}
Metric = Callable[[LevelResult], Optional[float]]


def _series(arm: ReportArm, metric: Metric) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for lv in sorted(arm.levels, key=lambda lv: lv.offered):  # a search runs its levels out of order
        v = metric(lv)
        if v is not None:
            xs.append(lv.offered)
            ys.append(v)
    return xs, ys


def _rates(arms: Sequence[ReportArm]) -> bool:
    """The levels offered request rates (open loop): the x axis is the rate."""
    return any(lv.offered_rate is not None for a in arms for lv in a.levels)


def _knees_of(arm: ReportArm) -> dict[str, Optional[float]]:
    k = arm_knees(arm)
    return {"plateau": k.plateau, "queueing": k.queueing, "c_90": k.c_90, "power": k.power.concurrency}


def _mark_knees(ax, arm: ReportArm, metric: Metric) -> None:
    by_c = {lv.offered: metric(lv) for lv in arm.levels}
    for name, c in _knees_of(arm).items():
        y = by_c.get(c) if c is not None else None
        if y is not None:
            ax.plot([c], [y], KNEE_MARKERS[name], markersize=11, markerfacecolor="none", markeredgecolor="black",
                    markeredgewidth=1.4, zorder=5)


def _knee_legend(ax) -> None:
    arms = ax.get_legend_handles_labels()
    handles = list(arms[0]) + [Line2D([], [], linestyle="none", marker=m, markerfacecolor="none",
                                      markeredgecolor="black", markersize=8, label=f"knee: {n}")
                               for n, m in KNEE_MARKERS.items()]
    handles.append(Line2D([], [], linestyle="none", marker="x", color="grey", label="invalid level (client-bound)"))
    handles.append(Line2D([], [], linestyle=":", color="black", label="predicted knee (KV pool / cap)"))
    ax.legend(handles=handles, fontsize=7, loc="best")


def _vs_c(arms: Sequence[ReportArm], metric: Metric, ylabel: str, title: str, knees: bool,
          logy: bool = False, second: Optional[Metric] = None, second_label: str = "") -> plt.Figure:
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for i, arm in enumerate(arms):
        color = f"C{i % 10}"
        xs, ys = _series(arm, metric)
        if xs:
            ax.plot(xs, ys, "-o", color=color, markersize=4, label=arm.key)
        if second is not None:
            xs2, ys2 = _series(arm, second)
            if xs2:
                ax.plot(xs2, ys2, "--", color=color, marker=".", label=f"{arm.key} {second_label}")
        bad = [(lv.offered, metric(lv)) for lv in arm.levels if not lv.valid and metric(lv) is not None]
        if bad:
            ax.plot([c for c, _ in bad], [y for _, y in bad], "x", color="grey", markersize=8, zorder=4)
        if knees:
            _mark_knees(ax, arm, metric)
            if arm.predicted is not None and arm.predicted.concurrency is not None and not _rates(arms):
                ax.axvline(arm.predicted.concurrency, color=color, linestyle=":", linewidth=1)
    ax.set_xlabel("offered request rate (req/s)" if _rates(arms) else "offered concurrency C")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.grid(True, alpha=0.3, which="both")
    _knee_legend(ax) if knees else ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def _frontier(arms: Sequence[ReportArm], at: Sequence[float]) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for i, arm in enumerate(arms):
        color = f"C{i % 10}"
        pts = [lv for lv in arm.levels if lv.per_user_tok_s is not None and lv.output_tok_s is not None]
        ax.plot([lv.per_user_tok_s for lv in pts], [lv.output_tok_s for lv in pts], "-o", color=color,
                markersize=4, label=arm.key)
        for lv in pts:
            ax.annotate(f"{lv.offered:g}", (lv.per_user_tok_s, lv.output_tok_s), fontsize=6,
                        xytext=(3, 3), textcoords="offset points", color=color)
        for t in at:
            p = matched(arm, t)
            if p is not None:
                ax.plot([t], [p.output_tok_s], "X", color=color, markersize=9, markeredgecolor="black", zorder=5)
    for t in at:
        ax.axvline(t, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("per-user tok/s (interactivity)")
    ax.set_ylabel("output tok/s")
    ax.set_title("Throughput vs per-user speed frontier (labels: C; X: matched-interactivity points)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def write_figures(arms: Sequence[ReportArm], at: Sequence[float], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = {
        "throughput_vs_concurrency": _vs_c(arms, lambda lv: lv.output_tok_s, "output tok/s",
                                           "Throughput vs concurrency", knees=True),
        "ttft_vs_concurrency": _vs_c(arms, lambda lv: lv.ttft_p50_s, "TTFT s (log)", "TTFT p50 (solid) and p99 (dashed)",
                                     knees=True, logy=True, second=lambda lv: lv.ttft_p99_s, second_label="p99"),
        "per_user_vs_concurrency": _vs_c(arms, lambda lv: lv.per_user_tok_s, "per-user tok/s",
                                         "Per-user speed vs concurrency", knees=False),
        "frontier": _frontier(arms, at),
        "accept_length_vs_concurrency": _vs_c(arms, lambda lv: lv.accept_length, "accepted tokens per verify step",
                                              "Acceptance length vs concurrency", knees=False),
    }
    paths = []
    for name, fig in figs.items():
        p = out_dir / f"{name}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths

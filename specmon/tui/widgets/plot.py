"""A metric against offered concurrency (or request rate), one line per arm, the knee marked (◆ and
a ┆ column)."""

from __future__ import annotations

from typing import Callable, Optional

from rich.text import Text

from specmon.tui.chart import Series, arm_glyph, xy_plot
from specmon.tui.state import SessionState
from specmon.tui.widgets.base import StyledWidget


class LevelPlot(StyledWidget):
    DEFAULT_CSS = "LevelPlot { height: 1fr; min-height: 6; }"

    def __init__(self, session: SessionState, metric: str, title: str,
                 y_fmt: Callable[[float], str], **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.metric = metric
        self.title = title
        self.y_fmt = y_fmt

    def series(self) -> list[tuple[int, Series]]:
        out = []
        self.rates = False
        with self.session.lock:
            for arm in self.session.arms.values():
                # by offered value: an SLO search runs its levels out of order
                pts = sorted((float(r.offered), getattr(r, self.metric)) for r in arm.levels)
                rates = any(r.offered_rate is not None for r in arm.levels)
                self.rates = self.rates or rates
                knee: Optional[float] = None
                if arm.confirmed_knee is not None:
                    knee = arm.confirmed_knee.concurrency
                # the predicted knee is a concurrency: it has no place on a rate axis
                pred = arm.predicted_knee.concurrency if arm.predicted_knee and not rates else None
                out.append((arm.index, Series(arm.name, pts, knee, pred)))
        return out

    def render(self) -> Text:
        width, height = max(self.size.width, 20), max(self.size.height, 4)
        indexed = self.series()
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append(self.title.replace(" vs C", " vs rate") if self.rates else self.title, style=self.st("label"))
        for idx, s in indexed:  # legend items whole, as many as fit (each arm's glyph is in the table too)
            item = f"  {arm_glyph(idx)} {s.label}"
            if head.cell_len + len(item) <= width:
                head.append(item, style=self.arm_style(idx))
        if head.cell_len + 20 <= width:
            head.append("  ◆ knee ┊ predicted", style=self.st("dim"))
        head.truncate(width, overflow="ellipsis")
        plot = xy_plot([s for _, s in indexed], width, height - 1, y_fmt=self.y_fmt)
        lines = [head]
        axis_style = self.st("dim")
        for label, row in zip(plot.y_labels, plot.rows):
            line = Text(no_wrap=True)
            line.append(label.rjust(6)[:6] + "┤" if label else "      │", style=axis_style)
            for ch, si, kind in row:
                if si < 0:
                    line.append(ch)
                else:
                    style = self.arm_style(indexed[si][0])
                    if kind == "knee":
                        style = style + self.st("warn")
                    elif kind == "pred":
                        style = self.st("dim")
                    line.append(ch, style=style)
            lines.append(line)
        lines.append(Text(plot.x_axis, style=axis_style, no_wrap=True))
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)

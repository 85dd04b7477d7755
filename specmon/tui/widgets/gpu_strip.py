"""Host line: one compact bar per GPU (NVML) and host CPU/memory; or why NVML is unavailable."""

from __future__ import annotations

from rich.text import Text

from specmon.tui import fmt
from specmon.tui.chart import bar
from specmon.tui.state import SessionState
from specmon.tui.widgets.base import StyledWidget

CELL_W = 38  # one GPU: "GPU0 ████▌     71.2/95.6G 310W 62°"


class GpuStrip(StyledWidget):
    DEFAULT_CSS = "GpuStrip { height: auto; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session

    def render(self) -> Text:
        width = max(self.size.width, 40)
        with self.session.lock:
            snap, host = self.session.gpus, self.session.host
            cells: list[Text] = []
            if snap is None:
                why = "no host GPU reading in this session" if self.session.ticks else "no NVML reading yet"
                cells.append(Text.assemble((" GPU ", self.st("label")), (why, self.st("dim"))))
            elif not snap.available:
                cells.append(Text.assemble((" GPU ", self.st("label")),
                                           (fmt.nvml_unavailable(snap.reason), self.st("warn"))))
            else:
                for g in snap.gpus:
                    frac = (g.mem_used_bytes / g.mem_total_bytes
                            if g.mem_used_bytes is not None and g.mem_total_bytes else None)
                    filled, empty = bar(frac, 8)
                    c = Text.assemble(
                        (f" GPU{g.index} ", self.st("label")),
                        (filled, self.st("bar-bad" if frac and frac >= 0.97 else "bar")),
                        (empty, self.st("bar-empty")), " ",
                        (f"{fmt.gib(g.mem_used_bytes)}", self.st("value")),
                        (f"/{fmt.gib(g.mem_total_bytes, 0)}G", self.st("unit")),
                    )
                    if g.power_w is not None:
                        c.append(f" {g.power_w:.0f}", style=self.st("value"))
                        c.append("W", style=self.st("unit"))
                    if g.util_pct is not None:
                        c.append(f" {g.util_pct:.0f}", style=self.st("value"))
                        c.append("%", style=self.st("unit"))
                    cells.append(c)
            if host is not None:
                h = Text.assemble((" host ", self.st("label")), ("cpu ", self.st("unit")),
                                  (fmt.num(host.cpu_pct), self.st("value")), ("%", self.st("unit")))
                if host.mem_used_bytes is not None:
                    h.append(" mem ", style=self.st("unit"))
                    h.append(fmt.gib(host.mem_used_bytes, 0), style=self.st("value"))
                    h.append(f"/{fmt.gib(host.mem_total_bytes, 0)}G", style=self.st("unit"))
                cells.append(h)
        # Pack cells into lines, padded to a common column width so they align.
        col = max(CELL_W, max(c.cell_len for c in cells) + 1)
        per_line = max(1, width // col)
        lines = []
        for i in range(0, len(cells), per_line):
            line = Text(no_wrap=True)
            for c in cells[i:i + per_line]:
                c.truncate(col, pad=True)
                line.append_text(c)
            lines.append(line)
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)

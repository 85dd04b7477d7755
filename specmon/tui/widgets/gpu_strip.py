"""Host line: one compact bar per GPU (NVML), the simulated arms' cards (labelled simulated), host
CPU/memory, and, said once, why NVML is unavailable.

Every cell has shorter forms; the strip takes the richest forms that need the fewest lines, so no
word is ever cut (a cell with no form narrow enough for a whole line loses whole words, with an
ellipsis).
"""

from __future__ import annotations

from typing import Optional, Sequence

from rich.text import Text

from specmon.model import GpuReading
from specmon.tui import fmt
from specmon.tui.chart import bar
from specmon.tui.state import SessionState
from specmon.tui.widgets.base import StyledWidget, assemble, text

CELL_W = 38  # one GPU: "GPU0 ████▌     71.2/95.6G 310W 62°"


def cut_words(text: Text, width: int) -> Text:
    """`text` in at most `width` cells, cut after a whole word (with an ellipsis), never inside one."""
    if text.cell_len <= width:
        return text
    plain = text.plain
    cut = plain.rfind(" ", 0, max(0, width - 1))
    while cut > 0 and plain[cut - 1] == " ":
        cut -= 1
    out = text.copy()
    out.truncate(max(0, cut))
    if width >= 1:
        out.append("…")
    return out


def fit(variants: Sequence[Text], width: int) -> Text:
    """The first (longest) form that fits in `width`, else the last one cut after a whole word."""
    for v in variants:
        if v.cell_len <= width:
            return v
    return cut_words(variants[-1], width)


def nvml_state_forms(reason: Optional[str]) -> list[str]:
    """Why NVML is unavailable, longest first: the collector's whole reason, without its
    parenthesis, then its core words ("no NVIDIA driver")."""
    full = fmt.nvml_unavailable(reason)
    core = full.split(":", 1)[1].strip() if ":" in full else full
    short = core.split(" (")[0].strip() or core
    out: list[str] = []
    for f in (full, f"NVML unavailable: {short}", short):
        if f not in out:
            out.append(f)
    return out


def _wrap(cells: Sequence[Text], width: int) -> list[Text]:
    lines: list[Text] = []
    cur, used = Text(no_wrap=True), 0
    for c in cells:
        if used and used + c.cell_len > width:
            lines.append(cur)
            cur, used = Text(no_wrap=True), 0
        c = cut_words(c, width)
        cur.append_text(c)
        used += c.cell_len
    if used or not lines:
        lines.append(cur)
    return lines


def _lines_needed(cells: Sequence[Text], width: int) -> int:
    """How many lines _wrap makes of these cells, from their widths alone (a cell wider than
    the line is cut by _wrap: then it is asked)."""
    widths = [c.cell_len for c in cells]
    if widths and max(widths) > width:
        return len(_wrap(cells, width))
    lines, used = 0, 0
    for w in widths:
        if used and used + w > width:
            lines, used = lines + 1, 0
        used += w
    return lines + (1 if used or not lines else 0)


def pack(cells: Sequence[Sequence[Text]], width: int) -> list[Text]:
    """Cells (each a list of forms, longest first) into lines of at most `width` cells: every cell
    at its k-th form (or its shortest), for the smallest k that needs the fewest lines, so the
    cells stay alike and the line as rich as the room allows. The lines are counted for each k
    and made for the chosen one only (24 simulated GPUs: four wraps of ~30 cells a tick)."""
    best_k, best_n = 0, None
    for k in range(max((len(f) for f in cells), default=1)):
        n = _lines_needed([forms[min(k, len(forms) - 1)] for forms in cells], width)
        if best_n is None or n < best_n:
            best_k, best_n = k, n
    return _wrap([forms[min(best_k, len(forms) - 1)] for forms in cells], width)


class GpuStrip(StyledWidget):
    DEFAULT_CSS = "GpuStrip { height: auto; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session

    def _gpu_cell(self, label: Text, g: GpuReading, bar_w: int, util: bool) -> Text:
        frac = (g.mem_used_bytes / g.mem_total_bytes
                if g.mem_used_bytes is not None and g.mem_total_bytes else None)
        value, unit = self.st("value"), self.st("unit")
        parts: list = [label.plain]
        if bar_w:
            filled, empty = bar(frac, bar_w)
            parts += [(filled, self.st("bar-bad" if frac and frac >= 0.97 else "bar")),
                      (empty, self.st("bar-empty")), " "]
        parts += [(f"{fmt.gib(g.mem_used_bytes)}", value), (f"/{fmt.gib(g.mem_total_bytes, 0)}G", unit)]
        if g.power_w is not None:
            parts += [(f" {g.power_w:.0f}", value), ("W", unit)]
        if util and g.util_pct is not None:
            parts += [(f" {g.util_pct:.0f}", value), ("%", unit)]
        # as label.copy() with the parts appended: the label's style stays the whole cell's
        c = assemble(*parts, no_wrap=label.no_wrap)
        c.spans[0:0] = label.spans
        c.style = label.style
        return c

    def _label(self, words: str, style=None) -> Text:
        return text(words, style if style is not None else self.st("label"))

    def cells(self) -> list[list[Text]]:
        snap, host = self.session.gpus, self.session.host
        cells: list[list[Text]] = []
        real = snap.host_gpus if snap is not None else []
        sim = snap.simulated_gpus if snap is not None else []
        if sim:
            # the simulator's own account of the card it simulates: said so before its cells
            cells.append([self._label(" simulated:", self.st("warn"))])
            per_arm: dict[Optional[str], int] = {}
            for g in sim:
                per_arm[g.arm] = per_arm.get(g.arm, 0) + 1
            for g in sim:
                arm = self.session.arms.get(g.arm) if g.arm is not None else None
                name = (g.arm or "?") + (f" GPU{g.index}" if per_arm[g.arm] > 1 else "")
                label = text(f" {name} ", self.arm_style(arm.index) if arm is not None else self.st("label"))
                cells.append([self._gpu_cell(label, g, 8, True), self._gpu_cell(label, g, 5, True),
                              self._gpu_cell(label, g, 5, False), self._gpu_cell(label, g, 0, False)])
        if real:
            forms = [self._gpu_cell(self._label(f" GPU{g.index} "), g, 8, True) for g in real]
            col = max(CELL_W, max(c.cell_len for c in forms) + 1)  # aligned columns of a multi-GPU host
            for c in forms:
                padded = c.copy()
                padded.pad_right(col - c.cell_len)
                cells.append([padded, c + Text(" ")])
        lead = " host GPU " if sim else " GPU "
        if snap is None:
            why = "no host GPU reading in this session" if self.session.ticks else "no NVML reading yet"
            cells.append([assemble((lead, self.st("label")), (why, self.st("dim")))])
        elif not snap.available:
            cells.append([assemble((lead, self.st("label")), (f, self.st("warn" if not sim else "dim")))
                          for f in nvml_state_forms(snap.reason)])
        if host is not None:
            parts = [(" host ", self.st("label")), ("cpu ", self.st("unit")),
                     (fmt.num(host.cpu_pct), self.st("value")), ("%", self.st("unit"))]
            if host.mem_used_bytes is not None:
                parts += [(" mem ", self.st("unit")), (fmt.gib(host.mem_used_bytes, 0), self.st("value")),
                          (f"/{fmt.gib(host.mem_total_bytes, 0)}G", self.st("unit"))]
            cells.append([assemble(*parts)])
        return cells

    def render(self) -> Text:
        width = max(self.size.width, 40)
        with self.session.lock:
            cells = self.cells()
        return Text("\n", no_wrap=True, overflow="ellipsis").join(pack(cells, width))

"""GPU memory of one arm: used/total with a bar, power, and its history (from the arm's Sample).

A simulated arm's figures are its simulator's account of the card it simulates (gpu_source
"simulated"): the history row then says so, with what holds the memory (weights, KV pool, CUDA
graphs). An arm without a GPU reading says so in two words; why (no driver...) is said once, on
the GPU line, not on every arm.
"""

from __future__ import annotations

from rich.text import Text

from specmon.model import GpuReading
from specmon.tui import fmt
from specmon.tui.chart import bar
from specmon.tui.widgets.base import INLINE_MIN_W, INLINE_VALUE_W, LABEL_W, ArmPane, assemble, text
from specmon.tui.widgets.gpu_strip import fit


class GpuPane(ArmPane):
    LABEL = "GPU"

    def lines(self, width: int) -> list[Text]:
        """ArmPane.lines, built again only when what the pane shows changed: a card's memory
        and power (to the watt) hold still for many ticks. Kept by every figure it reads, its
        history when it draws one, the width and the styles; the Texts kept are only read."""
        with self.session.lock:
            s = self.arm.last
            gpus = self.session.gpus
            figures = None if s is None else (s.gpu_mem_used_bytes, s.gpu_mem_total_bytes, s.gpu_power_w,
                                               s.gpu_source)
            sim = tuple((g.weights_bytes, g.kv_pool_bytes, g.cuda_graph_bytes) for g in self._simulated())
            history = None
            if s is None or s.gpu_source != "simulated" or self.chart_height > 1:
                history = self.session.series(self.arm_name, "gpu_mem_used_bytes", last=max(width, 20))
            key = (width, self.chart_height, figures, None if gpus is None else gpus.available, sim, history,
                   *(self.st(n) for n in ("value", "unit", "dim", "bar", "bar-bad", "bar-empty", "warn", "spark")))
            kept = self.__dict__.get("_specmon_kept")
            if kept is None or kept[0] != key:
                kept = self._specmon_kept = (key, super().lines(width))
        return kept[1]

    def _frac(self):
        s = self.arm.last
        if s is None or s.gpu_mem_used_bytes is None or not s.gpu_mem_total_bytes:
            return None
        return s.gpu_mem_used_bytes / s.gpu_mem_total_bytes

    def _simulated(self) -> list[GpuReading]:
        """This arm's simulated card(s) in the newest reading."""
        snap = self.session.gpus
        return [g for g in snap.gpus if g.simulated and g.arm == self.arm_name] if snap is not None else []

    def _room(self) -> int:
        """Cells the value gets (as ArmPane.lines lays it out), on the pane's real width."""
        width = max(self.width, 20)
        if self.chart_height == 1 and width >= INLINE_MIN_W:
            return INLINE_VALUE_W
        return max(4, (self.width or width) - LABEL_W)

    def value(self) -> Text:
        s = self.arm.last
        gpus = self.session.gpus
        if s is None or s.gpu_mem_used_bytes is None:
            if gpus is not None and not gpus.available and not self._simulated():
                return fit([Text(t, style=self.st("dim")) for t in ("no GPU reading", "no reading", "none")],
                           self._room())
            return self.unknown()
        frac = self._frac()
        level = "bar-bad" if frac is not None and frac >= 0.97 else "bar"
        room = self._room()
        used, total, power = s.gpu_mem_used_bytes, s.gpu_mem_total_bytes, s.gpu_power_w

        value, unit_style, dim = self.st("value"), self.st("unit"), self.st("dim")

        def form(bar_w: int, digits: int, unit: str, dot: bool) -> Text:
            out: list = []
            if bar_w:
                filled, empty = bar(frac, bar_w)
                out += [(filled, self.st(level)), (empty, self.st("bar-empty")), " "]
            out += [(fmt.gib(used), value), (f"/{fmt.gib(total, digits)}{unit}", unit_style)]
            if power is not None:
                out += [(" · " if dot else " ", dim), (f"{power:.0f}", value), (" W" if dot else "W", unit_style)]
            return assemble(*out)

        # whole figures only: a narrower pane drops the bar, then the spaces, never a digit (the
        # forms built longest first until one fits, as fit() would choose among them all)
        for shape in ((10, 1, " GiB", True), (5, 1, " GiB", True), (0, 1, " GiB", True), (0, 0, "G", False)):
            out = form(*shape)
            if out.cell_len <= room:
                return out
        return fit([text(fmt.gib(used), value)], room)

    def split_forms(self) -> list[Text]:
        """'simulated' and what holds the memory, longest first (a form for every width)."""
        gs = self._simulated()

        def total(attr: str):
            vals = [getattr(g, attr) for g in gs]
            return sum(vals) if vals and all(v is not None for v in vals) else None

        w, kv, gr = total("weights_bytes"), total("kv_pool_bytes"), total("cuda_graph_bytes")
        tag = ("simulated", self.st("warn"))

        def figure(name: str, v) -> list:
            return [] if v is None else [(f" {name} ", self.st("unit")), (fmt.gib(v), self.st("value"))]

        colon = (":", self.st("dim"))
        gib_unit, g_unit = (" GiB", self.st("unit")), ("G", self.st("unit"))
        forms = [
            assemble(tag, colon, *figure("weights", w), *figure("· KV pool", kv), *figure("· graphs", gr), gib_unit),
            assemble(tag, colon, *figure("weights", w), *figure("· KV", kv), *figure("· graphs", gr), gib_unit),
            assemble(tag, colon, *figure("weights", w), *figure("KV", kv), gib_unit),
            assemble(tag, colon, *figure("weights", w), *figure("KV", kv), g_unit),
            assemble(tag, colon, *figure("KV", kv), gib_unit),
            assemble(tag),
            Text("sim", style=self.st("warn")),
        ]
        if w is None and kv is None:
            forms = forms[-2:]
        return forms

    def split_row(self, width: int) -> Text:
        """The fitting form of split_forms, built again only when what it shows changed: the
        simulated pools are fixed from start-up, yet its seven forms were about a seventh of
        building all the panes each tick (cProfile, three arms). Kept by the figures, the styles
        and the width; the Text kept is only ever copied into the pane's lines, never changed."""
        gs = self._simulated()
        key = (width, tuple((g.weights_bytes, g.kv_pool_bytes, g.cuda_graph_bytes) for g in gs),
               *(self.st(n) for n in ("warn", "dim", "unit", "value")))
        kept = self.__dict__.get("_specmon_split")
        if kept is None or kept[0] != key:
            kept = self._specmon_split = (key, fit(self.split_forms(), width))
        return kept[1]

    def chart(self, width: int, height: int) -> list[Text]:
        s = self.arm.last
        hi = s.gpu_mem_total_bytes if s is not None and s.gpu_mem_total_bytes else None
        if s is not None and s.gpu_source == "simulated" and height >= 1:
            # The simulated pools do not move with load (allocated at startup, as SGLang's): the
            # first row tells what holds them instead of a flat line.
            rows = [self.split_row(width)]
            if height > 1:
                rows += self.spark("gpu_mem_used_bytes", width, height - 1, lo=0.0, hi=hi)
            return rows
        return self.spark("gpu_mem_used_bytes", width, height, lo=0.0, hi=hi)

"""GPU memory of one arm: used/total with a bar and its history (from the arm's Sample)."""

from __future__ import annotations

from rich.text import Text

from specmon.tui import fmt
from specmon.tui.chart import bar
from specmon.tui.widgets.base import ArmPane


class GpuPane(ArmPane):
    LABEL = "GPU"

    def _frac(self):
        s = self.arm.last
        if s is None or s.gpu_mem_used_bytes is None or not s.gpu_mem_total_bytes:
            return None
        return s.gpu_mem_used_bytes / s.gpu_mem_total_bytes

    def value(self) -> Text:
        s = self.arm.last
        gpus = self.session.gpus
        if s is None or s.gpu_mem_used_bytes is None:
            if gpus is not None and not gpus.available:
                return Text(fmt.nvml_unavailable(gpus.reason), style=self.st("warn"))
            return self.unknown()
        frac = self._frac()
        filled, empty = bar(frac, 10)
        level = "bar-bad" if frac is not None and frac >= 0.97 else "bar"
        return self.join(
            Text.assemble((filled, self.st(level)), (empty, self.st("bar-empty")), " ",
                          (f"{fmt.gib(s.gpu_mem_used_bytes)}", self.st("value")),
                          (f"/{fmt.gib(s.gpu_mem_total_bytes)} GiB", self.st("unit"))),
            None if s.gpu_power_w is None else Text.assemble(
                (f"{s.gpu_power_w:.0f}", self.st("value")), (" W", self.st("unit"))),
        )

    def chart(self, width: int, height: int) -> list[Text]:
        s = self.arm.last
        hi = s.gpu_mem_total_bytes if s is not None and s.gpu_mem_total_bytes else None
        return self.spark("gpu_mem_used_bytes", width, height, lo=0.0, hi=hi)

"""TTFT of one arm over the scrape window (p50/p90), flagged when queue time dominates it."""

from __future__ import annotations

from rich.text import Text

from specmon.tui import fmt
from specmon.tui.chart import QUEUE_MARK
from specmon.analysis.knee import QUEUE_TTFT_SHARE, queue_share
from specmon.tui.widgets.base import ArmPane, assemble, text


class TtftPane(ArmPane):
    LABEL = "TTFT"

    def queue_dominates(self) -> bool:
        share = queue_share(self.arm.last) if self.arm.last is not None else None
        return share is not None and share > QUEUE_TTFT_SHARE

    def note(self) -> Text:
        s = self.arm.last
        share = queue_share(s) if s is not None else None
        if share is None:
            return text("queue share —", self.st("dim"))
        words = f"TTFT {fmt.secs(s.ttft_mean_s)}: {fmt.secs(s.queue_time_mean_s)} queue"
        if share > QUEUE_TTFT_SHARE:
            return text(f"{QUEUE_MARK} " + words, self.st("warn"))
        return text(f"{words} ({share * 100:.0f}%)", self.st("dim"))

    def value(self) -> Text:
        s = self.arm.last
        if s is None or (s.ttft_p50_s is None and s.ttft_p90_s is None):
            return self.unknown()
        return self.join(
            assemble(("p50 ", self.st("unit")), (fmt.secs(s.ttft_p50_s), self.st("value"))),
            assemble(("p90 ", self.st("unit")), (fmt.secs(s.ttft_p90_s), self.st("value"))),
        )

    def chart(self, width: int, height: int) -> list[Text]:
        style = "spark-alt" if self.queue_dominates() else "spark"
        return self.spark("ttft_p50_s", width, height, lo=0.0, style=style)

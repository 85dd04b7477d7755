"""KV pool of one arm: occupancy bar, tokens used/capacity, the prefix cache's hit rate over the
scrape window when the server counts it (the cache lives in the pool), history (0..100 %)."""

from __future__ import annotations

from typing import Optional

from rich.text import Text

from specmon.model import kv_usage_of
from specmon.tui import fmt
from specmon.tui.chart import bar
from specmon.tui.widgets.base import LABEL_W, ArmPane, assemble

WARN, FULL = 0.85, 0.95


class KvPane(ArmPane):
    LABEL = "KV"

    def value(self) -> Text:
        s = self.arm.last
        if s is None or (s.kv_usage is None and s.kv_used_tokens is None):
            return self.unknown()
        usage = kv_usage_of(s.kv_usage, s.kv_used_tokens, s.kv_capacity_tokens)
        filled, empty = bar(usage, 10)
        level = "bar-bad" if usage is not None and usage >= FULL else (
            "bar-warn" if usage is not None and usage >= WARN else "bar")
        cap = s.kv_capacity_tokens
        if cap is None and self.arm.info is not None:
            cap = self.arm.info.kv_capacity_tokens
        def line(unit: str) -> Text:
            return self.join(
                assemble((filled, self.st(level)), (empty, self.st("bar-empty")), " ",
                         (fmt.pct(usage).rjust(6), self.st("bad" if level == "bar-bad" else "value"))),
                assemble((fmt.tokens(s.kv_used_tokens), self.st("value")),
                         (f"/{fmt.tokens(cap)}{unit}", self.st("unit"))),
            )

        t = line(" tok")
        # a narrow pane (four side by side at 160 columns) keeps the figures whole, not the unit
        return line("") if self.width and t.cell_len > self.width - LABEL_W else t

    def note(self) -> Optional[Text]:
        """The prefix cache's hit rate, once the server has reported one (the line stays, so the
        pane does not jump when a window has no prefill)."""
        s = self.arm.last
        if s is not None and s.cache_hit_rate is not None:
            self._cache_seen = True
        if not getattr(self, "_cache_seen", False):
            return None
        rate = None if s is None else s.cache_hit_rate
        return assemble(("prefix cache hit ", self.st("unit")), (fmt.pct(rate), self.st("value")))

    def chart(self, width: int, height: int) -> list[Text]:
        return self.spark("kv_usage", width, height, lo=0.0, hi=1.0)

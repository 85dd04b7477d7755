"""Generation throughput of one arm (server-side tok/s) and per running request."""

from __future__ import annotations

from rich.text import Text

from specmon.tui import fmt
from specmon.tui.widgets.base import ArmPane, assemble


class ThroughputPane(ArmPane):
    LABEL = "Gen"

    def value(self) -> Text:
        s = self.arm.last
        if s is None or s.gen_tok_s is None:
            return self.unknown()
        per_user = None
        if s.running_reqs:
            per_user = assemble((fmt.rate(s.gen_tok_s / s.running_reqs), self.st("value")),
                                     (" /req", self.st("unit")))
        return self.join(
            assemble((fmt.rate(s.gen_tok_s), self.st("value")), (" tok/s", self.st("unit"))),
            per_user,
        )

    def chart(self, width: int, height: int) -> list[Text]:
        return self.spark("gen_tok_s", width, height, lo=0.0)

"""Requests of one arm: running (against the cap) and queued, with both histories."""

from __future__ import annotations

from rich.text import Text

from specmon.tui import fmt
from specmon.tui.chart import spark_rows
from specmon.tui.widgets.base import ArmPane, assemble


class RequestsPane(ArmPane):
    LABEL = "Reqs"

    def value(self) -> Text:
        s = self.arm.last
        if s is None or (s.running_reqs is None and s.queued_reqs is None):
            return self.unknown()
        cap = self.arm.info.max_running_requests if self.arm.info else None
        queued = s.queued_reqs
        return self.join(
            assemble(("run ", self.st("unit")), (fmt.num(s.running_reqs), self.st("value")),
                          (f"/{cap}" if cap else "", self.st("unit"))),
            assemble(("queue ", self.st("unit")),
                          (fmt.num(queued), self.st("warn" if queued else "value"))),
        )

    def chart(self, width: int, height: int) -> list[Text]:
        # Running on the left half, queued on the right half, on one shared scale.
        run = self.session.series(self.arm_name, "running_reqs")
        que = self.session.series(self.arm_name, "queued_reqs")
        known = [v for v in run + que if v is not None]
        hi = max(known) if known else 1.0
        cap = self.arm.info.max_running_requests if self.arm.info else None
        if cap:
            hi = max(hi, float(cap))
        left = (width - 3) // 2
        right = width - 3 - left
        a = spark_rows(run, left, height, 0.0, hi)
        b = spark_rows(que, right, height, 0.0, hi)
        return [assemble((x, self.st("spark")), (" │ ", self.st("dim")), (y, self.st("spark-alt")))
                for x, y in zip(a, b)]

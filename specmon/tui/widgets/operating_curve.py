"""The operating curve of one arm: throughput by running requests, from the traffic it served
(analysis/observed.py), with the observed knee, the headroom before it and the current
operating point marked on the curve."""

from __future__ import annotations

from typing import Optional

from rich.text import Text

from specmon.tui.chart import spark_rows
from specmon.tui.widgets.base import ArmPane, assemble, text

LIMIT_WORDS = {"kv_pool": "KV pool", "request_cap": "request cap", "token_budget": "prefill budget",
               "compute": "compute"}


class OperatingCurvePane(ArmPane):
    LABEL = "Curve"

    # Drawn only once the arm has an observed curve (the first comes ~5 s into a session): a
    # replayed folder recorded without one keeps the panel it always had.
    def height(self, width: int) -> int:
        return 0 if self.arm.observed is None else super().height(width)

    def lines(self, width: int) -> list[Text]:
        return [] if self.arm.observed is None else super().lines(width)

    def value(self) -> Text:
        k = self.arm.observed
        if k is None:
            return self.unknown()
        if k.concurrency is None:
            seen = "—" if k.running_max is None else f"max {k.running_max} running"
            return assemble(("no knee yet ", self.st("dim")), (seen, self.st("value")))
        parts = [assemble(("knee ", self.st("unit")), (str(k.concurrency), self.st("value")),
                          (f" {LIMIT_WORDS.get(k.limit or '', k.limit or '?')}", self.st("unit")))]
        if k.running_now is not None:
            style = self.st("warn") if not k.headroom else self.st("value")
            parts.append(assemble(("running ", self.st("unit")), (str(k.running_now), style),
                                  (f" room ~{k.headroom}", style)))
        return self.join(*parts)

    def note(self) -> Optional[Text]:
        k = self.arm.observed
        if k is None:
            return None
        share = "" if k.queue_share_now is None else f"; queue {k.queue_share_now * 100:.0f}% of TTFT now"
        conf = f" ({k.confidence})" if k.confidence else ""
        # where TTFT and queue time came from: the server's per-request lines, or its histograms
        src = {"requests": f"; TTFT from {k.latency_requests} requests", "histograms": "; TTFT from histograms"}
        return text(f"{k.evidence_s:.0f} s of evidence{conf}{share}{src.get(k.latency_source or '', '')}",
                    self.st("dim"))

    def chart(self, width: int, height: int) -> list[Text]:
        """tok/s by running-request bin, left to right; the bin running now and the knee's bin
        drawn in the warning style (the knee also as the glyph row's '┆' when there is room)."""
        k = self.arm.observed
        if k is None or not k.curve or width <= 0:
            return [text(" " * max(width, 0), self.st("dim")) for _ in range(height)]  # the rows it takes
        points = k.curve
        per = max(1, width // len(points))
        values: list[Optional[float]] = []
        for p in points:
            values += [p.tok_s] * per
        rows = spark_rows(values, len(values), height, lo=0.0)
        marks = [i for i, p in enumerate(points)
                 if k.running_now is not None and p.running <= k.running_now < p.running + p.width]
        knee_at = [i for i, p in enumerate(points)
                   if k.concurrency is not None and p.running <= k.concurrency < p.running + p.width]
        out = []
        for r in rows:
            line = text(r, self.st("spark"))
            for i in knee_at:
                line.stylize(self.st("spark-alt"), i * per, (i + 1) * per)
            for i in marks:
                line.stylize(self.st("warn"), i * per, (i + 1) * per)
            out.append(line)
        return out


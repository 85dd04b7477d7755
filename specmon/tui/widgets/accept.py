"""Speculative acceptance length of one arm; "no speculation" when the server runs none (never 0)."""

from __future__ import annotations

from rich.text import Text

from specmon.tui.widgets.base import ArmPane, assemble, text


class AcceptPane(ArmPane):
    LABEL = "Accept"

    def value(self) -> Text:
        arm = self.arm
        if arm.speculation is False:
            return text("no speculation", self.st("dim"))
        s = arm.last
        if s is None or s.accept_length is None:
            return self.unknown()
        return self.join(
            assemble((f"{s.accept_length:.2f}", self.st("value")), (" tok/step", self.st("unit"))),
            None if s.accept_rate is None else assemble(
                ("rate ", self.st("unit")), (f"{s.accept_rate * 100:.0f}%", self.st("value"))),
        )

    def chart(self, width: int, height: int) -> list[Text]:
        if self.arm.speculation is False:
            return [Text("") for _ in range(height)]
        info = self.arm.info
        hi = float(info.speculative_num_draft_tokens) if info and info.speculative_num_draft_tokens else None
        return self.spark("accept_length", width, height, lo=1.0, hi=hi)

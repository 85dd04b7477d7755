"""Speculative acceptance of one arm: the live gauge (SGLang's last decode window) and, under it, the
newest ramp level's exact figures from its requests' own counts; "no speculation" when the server
runs none (never 0)."""

from __future__ import annotations

from typing import Optional

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
        # The gauge is SGLang's figure for its last decode log window only, not for a level or
        # the session: say so wherever it is the source, right after the figure (a narrow value
        # keeps its first whole parts: the label before the rate).
        return self.join(
            assemble((f"{s.accept_length:.2f}", self.st("value")), (" tok/step", self.st("unit"))),
            text("last decode window", self.st("dim")),
            None if s.accept_rate is None else assemble(
                ("rate ", self.st("unit")), (f"{s.accept_rate * 100:.0f}%", self.st("value"))),
        )

    def note(self) -> Optional[Text]:
        """The newest level's exact acceptance, from its requests' own counts (accept length,
        accepted / proposed drafts, the accepted-drafts-per-step histogram); no line until a
        level carries them."""
        lv = next((r for r in reversed(self.arm.levels) if r.accept_rate is not None), None)
        if lv is None:
            return None
        hist = " ".join((lv.accept_hist or "").split(";"))
        return self.join(
            text(f"{lv.label} exact", self.st("unit")),
            None if lv.accept_length is None or lv.accept_length_source != "requests" else assemble(
                (f"{lv.accept_length:.2f}", self.st("value")), (" tok/step", self.st("unit"))),
            assemble(("rate ", self.st("unit")), (f"{lv.accept_rate * 100:.0f}%", self.st("value"))),
            text(hist, self.st("dim")) if hist else None,
        )

    def chart(self, width: int, height: int) -> list[Text]:
        if self.arm.speculation is False:
            return [Text("") for _ in range(height)]
        info = self.arm.info
        hi = float(info.speculative_num_draft_tokens) if info and info.speculative_num_draft_tokens else None
        return self.spark("accept_length", width, height, lo=1.0, hi=hi)

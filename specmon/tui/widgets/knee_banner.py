"""A banner once a knee is confirmed: per arm, the level, the definition, and the predicted knee."""

from __future__ import annotations

from rich.text import Text

from specmon.tui.chart import arm_glyph
from specmon.tui.state import SessionState
from specmon.tui.widgets.base import StyledWidget


class KneeBanner(StyledWidget):
    DEFAULT_CSS = "KneeBanner { height: auto; display: none; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session

    def render(self) -> Text:
        lines = []
        with self.session.lock:
            for arm in self.session.arms.values():
                k = arm.confirmed_knee
                if k is None:
                    continue
                t = Text(no_wrap=True, overflow="ellipsis")
                t.append(" KNEE ", style=self.st("warn"))
                t.append(f"{arm_glyph(arm.index)} {arm.name}", style=self.arm_style(arm.index))
                # Every definition confirmed so far (plateau and queueing can disagree: the gap
                # between them is the operator's answer), the latest one's words at the end.
                by_definition = {x.definition: x for x in arm.knees}
                for i, (definition, x) in enumerate(by_definition.items()):
                    t.append("  " if i == 0 else " · ", style=self.st("unit"))
                    t.append(f"{definition} ", style=self.st("value"))
                    t.append("C=", style=self.st("unit"))
                    t.append("—" if x.concurrency is None else f"{x.concurrency:g}", style=self.st("value"))
                pk = arm.predicted_knee
                if pk is not None and pk.concurrency is not None:
                    t.append("  predicted C≈", style=self.st("unit"))
                    t.append(f"{pk.concurrency:.1f}", style=self.st("value"))
                if k.detail:
                    t.append("  " + k.detail, style=self.st("dim"))
                lines.append(t)
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)

    def update_visibility(self) -> None:
        with self.session.lock:
            self.display = bool(self.session.knee_events)
        self.refresh(layout=True)

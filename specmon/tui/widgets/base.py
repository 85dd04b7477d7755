"""The base of every arm pane: component styles from the stylesheet, and the label/value/chart row.

Colours live only in specmon.tcss (theme variables), reached here through component classes,
so NO_COLOR and themes work; meaning never rests on colour alone (bold, glyphs, words).
"""

from __future__ import annotations

from typing import Optional, Sequence

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from specmon.tui.chart import spark_rows
from specmon.tui.state import ArmState, SessionState

LABEL_W = 7
INLINE_MIN_W = 64  # wide enough to put the history on the value's line
INLINE_VALUE_W = 36


class StyledWidget(Widget):
    COMPONENT_CLASSES = {
        "pane--label", "pane--value", "pane--unit", "pane--dim", "pane--warn", "pane--bad",
        "pane--good", "pane--spark", "pane--spark-alt", "pane--bar", "pane--bar-warn",
        "pane--bar-bad", "pane--bar-empty",
        "arm-0", "arm-1", "arm-2", "arm-3", "arm-4", "arm-5",
    }

    def st(self, name: str) -> Style:
        return self.get_component_rich_style(f"pane--{name}", partial=True)

    def arm_style(self, index: int) -> Style:
        return self.get_component_rich_style(f"arm-{index % 6}", partial=True)


class ArmPane(StyledWidget):
    """One metric of one arm: a label, the current value, and its history."""

    DEFAULT_CSS = "ArmPane { height: auto; }"
    LABEL = ""

    def __init__(self, session: SessionState, arm: str, chart_height: int = 1, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.arm_name = arm
        self.chart_height = chart_height

    @property
    def arm(self) -> ArmState:
        return self.session.arm(self.arm_name)

    def value(self) -> Text:
        raise NotImplementedError

    def chart(self, width: int, height: int) -> list[Text]:
        return []

    def note(self) -> Optional[Text]:
        """An extra line under the value (a pane that uses it always returns a line)."""
        return None

    def spark(self, key: str, width: int, height: int, lo=None, hi=None,
              style: str = "spark") -> list[Text]:
        rows = spark_rows(self.session.series(self.arm_name, key), width, height, lo, hi)
        return [Text(r, style=self.st(style)) for r in rows]

    def get_content_height(self, container, viewport, width: int) -> int:
        inline = self.chart_height == 1 and width >= INLINE_MIN_W
        with self.session.lock:
            has_note = self.note() is not None
        return 1 + int(has_note) + (0 if inline else self.chart_height)

    def render(self) -> Text:
        width = max(self.size.width, 20)
        with self.session.lock:
            value = self.value()
            label = Text(self.LABEL.ljust(LABEL_W), style=self.st("label"))
            if self.chart_height == 1 and width >= INLINE_MIN_W:
                value.truncate(INLINE_VALUE_W, pad=True)
                chart = self.chart(width - LABEL_W - INLINE_VALUE_W - 1, 1)
                lines = [Text.assemble(label, value, " ", *(chart[:1] or [Text("")]), no_wrap=True)]
                note = self.note()
                if note is not None:
                    lines.append(Text.assemble(" " * LABEL_W, note, no_wrap=True))
                return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)
            value.truncate(width - LABEL_W)
            lines = [Text.assemble(label, value, no_wrap=True)]
            note = self.note()
            if note is not None:
                lines.append(Text.assemble(" " * LABEL_W, note, no_wrap=True))
            for row in self.chart(width - LABEL_W, self.chart_height):
                lines.append(Text.assemble(" " * LABEL_W, row, no_wrap=True))
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)

    def join(self, *parts: Optional[Text | str | tuple]) -> Text:
        """Parts separated by a dim middle dot, skipping None."""
        out = Text()
        first = True
        for p in parts:
            if p is None:
                continue
            if not first:
                out.append(" · ", style=self.st("dim"))
            first = False
            if isinstance(p, tuple):
                out.append(*p)
            else:
                out.append(p)
        return out

    def unknown(self, why: str = "—") -> Text:
        return Text(why, style=self.st("dim"))


def split_width(width: int, parts: Sequence[int]) -> list[int]:
    total = sum(parts)
    out = [width * p // total for p in parts]
    out[-1] += width - sum(out)
    return out

"""A launched server's log: the tail, scrollable, filtered by a search string (`/`)."""

from __future__ import annotations

from textual.widgets import Log

from specmon.tui.chart import arm_glyph
from specmon.tui.state import SessionState


class LogPane(Log):
    def __init__(self, session: SessionState, arm: str, **kw) -> None:
        super().__init__(max_lines=5000, auto_scroll=True, **kw)
        self.session = session
        self.arm_name = arm
        self.shown_total = 0  # arm.log_total already written
        self.search: str = ""

    def on_mount(self) -> None:
        arm = self.session.arm(self.arm_name)
        self.border_title = f"{arm_glyph(arm.index)} {self.arm_name} log"
        self.redraw()

    def _matches(self, line: str) -> bool:
        return not self.search or self.search.lower() in line.lower()

    def redraw(self) -> None:
        """Append what arrived since the last redraw (only matching lines while searching)."""
        with self.session.lock:
            arm = self.session.arm(self.arm_name)
            new = arm.log_total - self.shown_total
            lines = list(arm.logs)[-new:] if new > 0 else []
            self.shown_total = arm.log_total
        lines = [x for x in lines if self._matches(x)]
        if lines:
            self.write_lines(lines)

    def set_search(self, text: str) -> None:
        self.search = text
        self.clear()
        self.shown_total = 0
        with self.session.lock:
            arm = self.session.arm(self.arm_name)
            lines = [x for x in arm.logs if self._matches(x)]
            self.shown_total = arm.log_total
        self.write_lines(lines)
        self.border_subtitle = f"/{text}  {len(lines)} lines" if text else ""

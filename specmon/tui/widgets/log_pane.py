"""A launched server's log: the tail, scrollable, filtered by a search string (`/`)."""

from __future__ import annotations

import re

from textual.widgets import Log

from specmon.tui.chart import arm_glyph
from specmon.tui.state import SessionState


# SGLang's stamp, '[2026-12-05 11:46:14] ' or '[2026-12-05 11:46:14 TP0] ': the date (the same
# all day) is left out on screen, so that a 40-column pane shows the line, not its stamp. The
# file in the session folder keeps every line as the server wrote it.
STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d (\d\d:\d\d:\d\d)(?:[.,]\d+)?( [^\]]*)?\] ")


def shown(line: str) -> str:
    return STAMP.sub(lambda m: m.group(1) + (m.group(2) or "") + " ", line, count=1)


class LogPane(Log):
    def __init__(self, session: SessionState, arm: str, **kw) -> None:
        super().__init__(max_lines=5000, auto_scroll=True, **kw)
        self.session = session
        self.arm_name = arm
        self.shown_total = 0  # arm.log_total already written
        self.search: str = ""
        # Follow the tail until the reader scrolls up (and again once back at the end). Log's own
        # auto_scroll follows only while its offset is at the end: lines written before the pane
        # had its size (the detail view's first ~40) left the offset short of the end once laid
        # out, and it never followed again.
        self.follow = True

    def on_mount(self) -> None:
        arm = self.session.arm(self.arm_name)
        self.border_title = f"{arm_glyph(arm.index)} {self.arm_name} log"
        self.redraw()
        self.call_after_refresh(self._to_end)

    def _to_end(self) -> None:
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if self.size.height and new < old:  # the reader scrolled up: stay where they are
            self.follow = new >= self.max_scroll_y
        elif new >= self.max_scroll_y:
            self.follow = True

    def _matches(self, line: str) -> bool:
        return not self.search or self.search.lower() in line.lower()

    def redraw(self) -> None:
        """Append what arrived since the last redraw (only matching lines while searching)."""
        with self.session.lock:
            arm = self.session.arm(self.arm_name)
            new = arm.log_total - self.shown_total
            lines = list(arm.logs)[-new:] if new > 0 else []
            self.shown_total = arm.log_total
        lines = [shown(x) for x in lines if self._matches(x)]
        if lines:
            self.write_lines(lines, scroll_end=False)
            self._to_end()

    def set_search(self, text: str) -> None:
        self.search = text
        self.clear()
        self.shown_total = 0
        with self.session.lock:
            arm = self.session.arm(self.arm_name)
            lines = [shown(x) for x in arm.logs if self._matches(x)]
            self.shown_total = arm.log_total
        self.write_lines(lines, scroll_end=False)
        self.follow = True
        self._to_end()
        self.border_subtitle = f"/{text}  {len(lines)} lines" if text else ""

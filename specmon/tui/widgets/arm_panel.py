"""One arm: header and the six metric panes, in a focusable bordered box; or, in compact mode
(the app's choice when the panels do not fit the terminal), the same six figures on one line."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget

from specmon.panes import ARM_PANES
from specmon.tui.chart import arm_glyph
from specmon.tui.state import SessionState
from specmon.tui.widgets.accept import AcceptPane
from specmon.tui.widgets.arm_header import ArmHeader, arm_status
from specmon.tui.widgets.arm_row import ArmRow, fit_words
from specmon.tui.widgets.gpu import GpuPane
from specmon.tui.widgets.kv import KvPane
from specmon.tui.widgets.requests import RequestsPane
from specmon.tui.widgets.throughput import ThroughputPane
from specmon.tui.widgets.ttft import TtftPane

# specmon/panes.py ARM_PANES, name by name (a layout's `panes:` picks among them)
PANE_WIDGETS = {"gpu": GpuPane, "kv": KvPane, "accept": AcceptPane, "queue": RequestsPane,
                "throughput": ThroughputPane, "ttft": TtftPane}
assert tuple(PANE_WIDGETS) == ARM_PANES


class ArmPanel(Vertical, can_focus=True):
    def __init__(self, session: SessionState, arm: str, chart_height: int = 1, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.arm_name = arm
        self.chart_height = chart_height
        self._panes: dict[str, Widget] = {}
        self.compact = False
        self._titles: tuple = ()  # (border title, subtitle) last set
        self.add_class(f"arm-{session.arm(arm).index % 6}")

    def compose(self) -> ComposeResult:
        yield ArmHeader(self.session, self.arm_name)
        for name, pane in PANE_WIDGETS.items():
            self._panes[name] = pane(self.session, self.arm_name, chart_height=self.chart_height)
            yield self._panes[name]
        yield ArmRow(self.session, self.arm_name)

    def set_compact(self, compact: bool) -> None:
        """One line (ArmRow) instead of the header and the panes, or back."""
        if compact == self.compact:
            return
        self.compact = compact
        self.set_class(compact, "-compact")
        self.redraw()

    def full_height(self, width: int) -> int:
        """Rows the bordered panel takes at this outer width (what compact mode saves)."""
        inner = max(width - 4, 20)  # the border and the padding
        rows = 2 + self.query_one(ArmHeader).get_content_height(None, None, inner)
        for name, pane in self._panes.items():
            if self.session.shows(name):
                rows += pane.get_content_height(None, None, inner)
        return rows

    def on_focus(self) -> None:
        self.query_one(ArmRow).refresh()  # its '›' mark

    def on_blur(self) -> None:
        self.query_one(ArmRow).refresh()

    def on_mount(self) -> None:
        self.update_titles()

    def update_titles(self) -> None:
        arm = self.session.arm(self.arm_name)
        # A fleet's worker says which fleet (and role) it belongs to: the panels of one gateway read as a group.
        group = " · ".join(x for x in (arm.fleet, arm.role if arm.role not in (None, "regular") else None) if x)
        title = f"{arm_glyph(arm.index)} {self.arm_name}" + (f" ({group})" if group else "")
        words, kind = arm_status(arm)
        subtitle = fit_words(words, 40)  # cut between words, never inside one
        # Setting a border title repaints the whole bordered panel (every line of it), even to
        # the same words: at 1 Hz that was the largest part of a tick's drawing. Set on change.
        if (title, subtitle) != self._titles:
            self._titles = (title, subtitle)
            self.border_title = title
            self.border_subtitle = subtitle
        self.set_class(kind == "bad", "-down")

    def redraw(self) -> None:
        self.update_titles()
        header, row = self.query_one(ArmHeader), self.query_one(ArmRow)
        if header.display == self.compact:
            header.display = not self.compact
            row.display = self.compact
        for name, pane in self._panes.items():
            want = self.session.shows(name) and not self.compact
            if pane.display != want:
                pane.display = want
        for child in self.children:
            if child.display:
                update = getattr(child, "update_view", None)  # only what changed (widgets/base.py)
                update() if update is not None else child.refresh(layout=True)

"""One arm: header and the six metric panes, in a focusable bordered box."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget

from specmon.panes import ARM_PANES
from specmon.tui.chart import arm_glyph
from specmon.tui.state import SessionState
from specmon.tui.widgets.accept import AcceptPane
from specmon.tui.widgets.arm_header import ArmHeader, arm_status
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
        self.add_class(f"arm-{session.arm(arm).index % 6}")

    def compose(self) -> ComposeResult:
        yield ArmHeader(self.session, self.arm_name)
        for name, pane in PANE_WIDGETS.items():
            self._panes[name] = pane(self.session, self.arm_name, chart_height=self.chart_height)
            yield self._panes[name]

    def on_mount(self) -> None:
        self.update_titles()

    def update_titles(self) -> None:
        arm = self.session.arm(self.arm_name)
        # A fleet's worker says which fleet (and role) it belongs to: the panels of one gateway read as a group.
        group = " · ".join(x for x in (arm.fleet, arm.role if arm.role not in (None, "regular") else None) if x)
        self.border_title = f"{arm_glyph(arm.index)} {self.arm_name}" + (f" ({group})" if group else "")
        words, kind = arm_status(arm)
        self.border_subtitle = words if len(words) < 40 else words[:39] + "…"
        self.set_class(kind == "bad", "-down")

    def redraw(self) -> None:
        self.update_titles()
        for name, pane in self._panes.items():
            if pane.display != self.session.shows(name):
                pane.display = self.session.shows(name)
        for child in self.children:
            child.refresh(layout=True)

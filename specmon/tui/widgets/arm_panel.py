"""One arm: header and the six metric panes, in a focusable bordered box; or, in compact mode
(the app's choice when the panels do not fit the terminal), the same six figures on one line.

One widget per arm draws all of it (the Line API: render_line hands Textual the arm's lines).
The header, each pane and the compact row build their own lines (one file each; ArmPane in
base.py); the panel turns a line into a Strip only when it reads differently from the one drawn
before, and repaints only those lines. With a widget per pane (a Vertical holding eight), every
tick the compositor rendered ~8 widgets per arm (their styles, backgrounds, padding, the
container under them) for lines nearly all of which changed anyway: most of a tick's drawing.
"""

from __future__ import annotations

from typing import Optional

from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from specmon.panes import ARM_PANES
from specmon.tui import textual_private
from specmon.tui.chart import arm_glyph
from specmon.tui.state import SessionState
from specmon.tui.widgets.accept import AcceptPane
from specmon.tui.widgets.arm_header import ArmHeader, arm_status
from specmon.tui.widgets.arm_row import ArmRow, fit_words
from specmon.tui.widgets.base import ArmPane, StyledWidget, repaint_lines
from specmon.tui.widgets.gpu import GpuPane
from specmon.tui.widgets.kv import KvPane
from specmon.tui.widgets.requests import RequestsPane
from specmon.tui.widgets.throughput import ThroughputPane
from specmon.tui.widgets.ttft import TtftPane
from specmon.tui.widgets.operating_curve import OperatingCurvePane

# specmon/panes.py ARM_PANES, name by name (a layout's `panes:` picks among them)
PANE_WIDGETS = {"gpu": GpuPane, "kv": KvPane, "accept": AcceptPane, "queue": RequestsPane,
                "throughput": ThroughputPane, "ttft": TtftPane,
                "curve": OperatingCurvePane}
assert tuple(PANE_WIDGETS) == ARM_PANES


class ArmPanel(StyledWidget, textual_private.PanelBase, can_focus=True):
    DEFAULT_CSS = "ArmPanel { height: auto; }"

    def __init__(self, session: SessionState, arm: str, chart_height: int = 1, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.arm_name = arm
        self.chart_height = chart_height
        self.header = ArmHeader(self, session, arm)
        self.panes: dict[str, ArmPane] = {name: pane(self, session, arm, chart_height=chart_height)
                                          for name, pane in PANE_WIDGETS.items()}
        self.row = ArmRow(self, session, arm)
        self.compact = False
        self._titles: tuple = ()  # (border title, subtitle) last set
        # what is drawn: line by line its part ('header', a pane's name, 'row'), its Text, a key
        # of what it reads as, its Strip; built for (width, base style), None: build again
        self._parts: list[str] = []
        self._texts: list[Text] = []
        self._keys: list[tuple] = []
        self._strips: list[Strip] = []
        self._built: Optional[tuple] = None
        self._frame: Optional[tuple] = None  # the edges of a content row, as Textual drew it (render_lines)
        self._filtered_styles: Optional[tuple] = None  # (filter, background, {style: its filtered style})
        self.rows_composed = 0  # content rows render_lines put together (tests read it)
        self.add_class(f"arm-{session.arm(arm).index % 6}")

    # -- what it shows -----------------------------------------------------------------------

    def _build(self, width: int) -> tuple[list[str], list[Text]]:
        # The component styles cannot change while the lines are built (on the app's loop): each
        # is looked up once for the build, not at every use (~100 a tick per arm).
        self._specmon_st_during = {}
        try:
            if self.compact:
                return ["row"], [self.row.line(width, self.has_focus)]
            parts: list[str] = []
            texts: list[Text] = []
            for name, lines in (("header", self.header.lines(width)),
                                *((n, p.lines(width)) for n, p in self.panes.items() if self.session.shows(n))):
                parts += [name] * len(lines)
                texts += lines
            return parts, texts
        finally:
            self._specmon_st_during = None

    def _update(self) -> Optional[list[int]]:
        """Build the lines for the present width; the lines whose Strip changed, or None when
        the number of lines did (a layout is due)."""
        width = self.size.width
        base = self.visual_style
        parts, texts = self._build(width)
        fresh = self._built != (width, base)
        self._built = (width, base)
        old_keys, old_strips = ([], []) if fresh else (self._keys, self._strips)
        keys, strips, changed = [], [], []
        for y, line in enumerate(texts):
            if line.cell_len > width:  # (wider than the pane: cut, as Textual would; render() keeps it whole)
                line = line.copy()
                line.truncate(width, overflow="ellipsis")
            key = (line.plain, line.style, tuple(line.spans))
            if y < len(old_keys) and old_keys[y] == key:
                strips.append(old_strips[y])
            else:
                strips.append(Strip(self._segments(_rich_styles(line), y, base), line.cell_len))
                changed.append(y)
            keys.append(key)
        grew = len(texts) != len(self._texts)
        self._parts, self._texts, self._keys, self._strips = parts, texts, keys, strips
        return None if grew else changed

    def render_line(self, y: int) -> Strip:
        if self.text_selection is not None:  # a mouse selection: Textual's own way, over render()
            return Widget.render_line(self, y)
        textual_private.forget_dirty(self)
        if self._built != (self.size.width, self.visual_style):  # resized, restyled, first drawn
            self._update()
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def render(self) -> Text:
        """All its lines as one Text, as built (what a text selection copies; a line too wide
        for the panel is whole here, cut where drawn)."""
        texts = self._texts
        if self._built is None or self._built[0] != self.size.width:
            # Built to be measured (Textual asks for the height of an auto-height widget here, at
            # a layout), not drawn: what is drawn changes in redraw(), which repaints the rows
            # that changed (and in render_line after a restyle or a resize, when Textual repaints
            # every row). Built into the drawn lines here, a row that changed between two ticks
            # was never repainted (a header kept "model —" after the model's name came;
            # tests/unit/test_tui_panel_rows.py caught it on a loaded machine).
            texts = self._build(self.size.width)[1]
        return Text("\n", no_wrap=True).join(texts)

    def part_text(self, part: str) -> str:
        """The text of the lines handed to Textual for one part ('header', a pane's name,
        'row'), as drawn: '' when that part is not shown."""
        return "\n".join(s.text for p, s in zip(self._parts, self._strips) if p == part)

    def parts(self) -> list[str]:
        """The parts drawn, in order, once each."""
        return list(dict.fromkeys(self._parts))

    def get_content_height(self, container, viewport, width: int) -> int:
        if self._built is not None and self._built[0] == width:
            return len(self._texts)
        return self._height(width)

    def _height(self, width: int) -> int:
        if self.compact:
            return 1
        return self.header.height(width) + sum(p.height(width) for n, p in self.panes.items()
                                               if self.session.shows(n))

    def full_height(self, width: int) -> int:
        """Rows the bordered panel takes at this outer width (what compact mode saves)."""
        inner = max(width - 4, 20)  # the border and the padding
        return 2 + self.header.height(inner) + sum(p.height(inner) for n, p in self.panes.items()
                                                   if self.session.shows(n))

    def notify_style_update(self) -> None:
        self._built = None  # the component styles may have changed: build the lines again
        self._frame = None
        super().notify_style_update()

    # -- state -------------------------------------------------------------------------------

    def set_compact(self, compact: bool) -> None:
        """One line (ArmRow) instead of the header and the panes, or back."""
        if compact == self.compact:
            return
        self.compact = compact
        self.set_class(compact, "-compact")
        self.redraw()

    def on_focus(self) -> None:
        self.redraw()  # the row's '›' mark

    def on_blur(self) -> None:
        self.redraw()

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
        """Build the lines again and repaint those that read differently (a layout when their
        number changed)."""
        self.update_titles()
        if not self.display:
            return  # drawn afresh when it is shown
        if not self.size.width:
            self.refresh(layout=True)  # not laid out yet
            return
        changed = self._update()
        if changed is None:
            self.refresh(layout=True)
        elif changed:
            width = self.size.width
            repaint_lines(self, [Region(0, y, width, 1) for y in changed])


def _rich_styles(line: Text) -> Text:
    """The line with a style named by a string (none of ours are) parsed into a Style."""
    if not (line.style and isinstance(line.style, str)) and not any(isinstance(s.style, str) for s in line.spans):
        return line
    out = line.copy()
    if out.style and isinstance(out.style, str):
        out.style = Style.parse(out.style)
    out.spans = [Span(s.start, s.end, Style.parse(s.style)) if isinstance(s.style, str) else s for s in out.spans]
    return out

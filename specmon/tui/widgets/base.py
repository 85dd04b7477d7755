"""The base of every arm pane: component styles from the stylesheet, and the label/value/chart row.

Colours live only in specmon.tcss (theme variables), reached here through component classes,
so NO_COLOR and themes work; meaning never rests on colour alone (bold, glyphs, words).
"""

from __future__ import annotations

import functools
from operator import itemgetter
from typing import Optional, Sequence

from rich.control import strip_control_codes
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.style import Style as VisualStyle
from textual.widget import Widget

from specmon.tui import textual_private
from specmon.tui.chart import spark_rows
from specmon.tui.state import ArmState, SessionState

LABEL_W = 7
INLINE_MIN_W = 64  # wide enough to put the history on the value's line
INLINE_VALUE_W = 36


class StyledWidget(textual_private.StyledBase):
    COMPONENT_CLASSES = {
        "pane--label", "pane--value", "pane--unit", "pane--dim", "pane--warn", "pane--bad",
        "pane--good", "pane--spark", "pane--spark-alt", "pane--bar", "pane--bar-warn",
        "pane--bar-bad", "pane--bar-empty",
        "arm-0", "arm-1", "arm-2", "arm-3", "arm-4", "arm-5",
    }

    def st(self, name: str) -> Style:
        during = self.__dict__.get("_specmon_st_during")
        if during is not None:  # one build of the widget's lines (ArmPanel): the styles hold still
            style = during.get(name)
            if style is None:
                style = during[name] = self._component_style(f"pane--{name}")
            return style
        return self._component_style(f"pane--{name}")

    def arm_style(self, index: int) -> Style:
        return self._component_style(f"arm-{index % 6}")

    def _component_style(self, component: str) -> Style:
        return textual_private.component_style(self, component)

    def notify_style_update(self) -> None:
        self.__dict__.pop("_specmon_styles", None)
        self.__dict__.pop("_specmon_summed", None)
        super().notify_style_update()

    # -- drawing ------------------------------------------------------------------------------

    def _segments(self, line: Text, y: int, base: VisualStyle) -> list[Segment]:
        """One line as Textual's Content would render it on `base` (its widget's style): the
        same pieces, each with the sum of the styles over it and its offset (text selection
        reads it), so the screen and the SVG screenshots are the same as before."""
        plain = line.plain
        if not line.style and line.spans:
            out = self._segments_in_order(plain, line.spans, y, base)
            if out is not None:
                return out
        spans = list(line.spans)
        if line.style:
            spans.insert(0, (0, len(plain), line.style))
        if not spans:
            return [Segment(plain, (base + base).rich_style_with_offset(0, y))]
        visual = self.__dict__.setdefault("_specmon_visual", {})  # rich style -> Textual's
        placed = self.__dict__.setdefault("_specmon_placed", {})  # (style, x, y) -> its rich style there
        if len(placed) > 4096:
            placed.clear()
        theme = self.app.ansi_theme
        styles = [base]
        for span in spans:
            style = visual.get(span[2])
            if style is None:
                style = visual[span[2]] = VisualStyle.from_rich_style(span[2], theme)
            styles.append(style)
        marks = [(0, False, 0), *((sp[0], False, i) for i, sp in enumerate(spans, 1)),
                 *((sp[1], True, i) for i, sp in enumerate(spans, 1)), (len(plain), True, 0)]
        marks.sort(key=itemgetter(0, 1))
        stack: list[int] = []
        summed: dict[tuple, VisualStyle] = {}
        out = []
        x = 0
        for (offset, leaving, index), (next_offset, _, _) in zip(marks, marks[1:]):
            if leaving:
                stack.remove(index)
            else:
                stack.append(index)
            if next_offset > offset:
                key = tuple(sorted(stack))
                style = summed.get(key)
                if style is None:
                    style = summed[key] = base + VisualStyle.combine([styles[i] for i in key])
                piece = plain[offset:next_offset]
                at = (style, x, y)
                rich = placed.get(at)
                if rich is None:  # the same style at the same place: most pieces from one tick to the next
                    rich = placed[at] = style.rich_style_with_offset(x, y)
                out.append(Segment(piece, rich))
                x += len(piece)
        return out

    def _segments_in_order(self, plain: str, spans, y: int, base: VisualStyle) -> Optional[list[Segment]]:
        """_segments for the usual line (what Text.assemble and append build): spans one after
        the other, none empty, none overlapping, no style over the whole line. The same pieces
        with the same styles as the general sweep, without its sort and stack; the sum of the
        base and a span's style kept from line to line (the same dozen styles on every line).
        None for any other line (the general sweep draws it)."""
        kept = self.__dict__.get("_specmon_summed")
        if kept is None or kept[0] is not base or len(kept[1]) > 512:
            kept = self._specmon_summed = (base, {None: base + VisualStyle.combine([base])})
        summed = kept[1]
        visual = self.__dict__.setdefault("_specmon_visual", {})  # rich style -> Textual's
        placed = self.__dict__.setdefault("_specmon_placed", {})  # (style, x, y) -> its rich style there
        if len(placed) > 4096:
            placed.clear()
        end_of_line = len(plain)
        pieces: list[tuple[int, int, object]] = []
        at = 0
        for start, end, rich in spans:
            if start < at or end <= start or end > end_of_line:
                return None
            if start > at:
                pieces.append((at, start, None))
            pieces.append((start, end, rich))
            at = end
        if at < end_of_line:
            pieces.append((at, end_of_line, None))
        out = []
        for start, end, rich in pieces:
            style = summed.get(rich)
            if style is None:
                own = visual.get(rich)
                if own is None:
                    own = visual[rich] = VisualStyle.from_rich_style(rich, self.app.ansi_theme)
                style = summed[rich] = base + VisualStyle.combine([base, own])
            where = (style, start, y)
            placed_style = placed.get(where)
            if placed_style is None:
                placed_style = placed[where] = style.rich_style_with_offset(start, y)
            out.append(Segment(plain[start:end], placed_style))
        return out

    def update_view(self) -> None:
        """Refresh when what render() draws changed, with a layout pass only when the number of
        lines did. A refresh is not free even when nothing changed: Textual renders the widget's
        lines again, and refresh(layout=True) arranges the whole screen again. At 1 Hz most of a
        screen (headers, a pane whose value held) draws the same as a second ago.

        What render() draws is built here and compared with what was drawn; the render after
        the refresh hands it over. Before the first layout (no size yet) it is a plain layout
        refresh."""
        if not self.display:
            return  # drawn afresh when it is shown (showing it asks for a layout)
        if not self.size.width:
            self.refresh(layout=True)
            return
        new = self.render()
        old = self.__dict__.get("_specmon_drawn")
        if isinstance(new, Text) and isinstance(old, Text) and new == old:
            return
        self._specmon_drawn = new
        self._specmon_next = (self.size.width, new)  # what the render after this refresh hands over
        if not isinstance(new, Text) or not isinstance(old, Text) or _lines(new) != _lines(old):
            self.refresh(layout=True)
        else:
            _repaint(self)

    def __init_subclass__(cls, **kw) -> None:
        """A subclass's render() first hands over what update_view just built for this width (the
        state has not moved in between: both run on the app's loop), so a widget that changed is
        built once a tick, not twice (the GPU strip with 24 GPUs builds ~100 cells)."""
        super().__init_subclass__(**kw)
        own = cls.__dict__.get("render")
        if own is None or getattr(own, "specmon_kept", False):
            return

        @functools.wraps(own)
        def render(self):
            nxt = self.__dict__.pop("_specmon_next", None)
            if nxt is not None and nxt[0] == self.size.width:
                return nxt[1]
            return own(self)

        render.specmon_kept = True
        cls.render = render


def _lines(t: Text) -> int:
    return t.plain.count("\n") + 1


def _repaint(widget: Widget) -> None:
    """What refresh() does for a repaint of a shown widget, with the widget handed to its
    screen's next update at once. refresh() wakes the widget's own message loop, which on going
    idle posts an Update message to the screen, which then marks the widget for its next
    compositor pass: two messages and two task switches per widget, for the same one pass."""
    repaint_lines(widget, ())


def repaint_lines(widget: Widget, regions) -> None:
    """_repaint for these regions of the widget's content only (all of it when none): the
    compositor then renders those lines, the widget's other lines kept from before."""
    textual_private.repaint_lines(widget, regions)


def text(plain: str, style: Style | str = "", no_wrap: Optional[bool] = None) -> Text:
    """Text(plain, style=style). (Building it around rich's constructor, which takes control
    codes out of every string, measured no faster a tick: benchmarks/tui_tick.py.)"""
    return Text(plain, style=style, no_wrap=no_wrap)


def assemble(*parts, no_wrap: Optional[bool] = None) -> Text:
    """Text.assemble for what the panes join (str, (str, style) and Text parts): the same text
    and spans in one Text built at once, not a part at a time through Text.append, which
    sanitises and measures each (a hundred appends per arm a tick were a third of building its
    lines). A piece with a control code in it (a server's model name can hold anything) loses
    it first, as Text.append would take it out, so the spans still fall on their pieces."""
    plain: list[str] = []
    spans: list[Span] = []
    at = 0
    for part in parts:
        if isinstance(part, Text):
            piece = part.plain
            if part.style:
                spans.append(Span(at, at + len(piece), part.style))
            spans.extend(Span(at + a, at + b, style) for a, b, style in part.spans)
        elif isinstance(part, str):
            piece = part if part.isprintable() else strip_control_codes(part)
        else:
            piece, style = part
            if not piece.isprintable():
                piece = strip_control_codes(piece)
            if style and piece:
                spans.append(Span(at, at + len(piece), style))
        plain.append(piece)
        at += len(piece)
    out = text("".join(plain), no_wrap=no_wrap)
    out.spans = spans
    return out


class ArmPane:
    """One metric of one arm: a label, the current value, and its history. Not a widget: the
    arm's panel (ArmPanel, one widget per arm) draws the lines its panes build, with the styles
    of its own component classes (`host.st`), so the compositor handles one widget per arm, not
    eight (header, six panes, compact row), each with its own render, styles and background."""

    LABEL = ""

    def __init__(self, host: StyledWidget, session: SessionState, arm: str, chart_height: int = 1) -> None:
        self.host = host
        self.session = session
        self.arm_name = arm
        self.chart_height = chart_height
        self.width = 0  # the width being built for (GpuPane lays its value out to it)

    @property
    def arm(self) -> ArmState:
        return self.session.arm(self.arm_name)

    def st(self, name: str) -> Style:
        return self.host.st(name)

    def value(self) -> Text:
        raise NotImplementedError

    def chart(self, width: int, height: int) -> list[Text]:
        return []

    def note(self) -> Optional[Text]:
        """An extra line under the value (a pane that uses it always returns a line)."""
        return None

    def spark(self, key: str, width: int, height: int, lo=None, hi=None,
              style: str = "spark") -> list[Text]:
        rows = spark_rows(self.session.series(self.arm_name, key, last=max(width, 0)), width, height, lo, hi)
        st = self.st(style)
        return [text(r, st) for r in rows]

    def height(self, width: int) -> int:
        """Lines the pane takes at this width."""
        inline = self.chart_height == 1 and width >= INLINE_MIN_W
        with self.session.lock:
            has_note = self.note() is not None
        return 1 + int(has_note) + (0 if inline else self.chart_height)

    def lines(self, width: int) -> list[Text]:
        """What the pane shows at this width, line by line, from the session state now."""
        self.width = width
        width = max(width, 20)
        with self.session.lock:
            value = self.value()
            label = text(self.LABEL.ljust(LABEL_W), self.st("label"))
            if self.chart_height == 1 and width >= INLINE_MIN_W:
                value = whole_parts(value, INLINE_VALUE_W)
                value.truncate(INLINE_VALUE_W, pad=True)
                chart = self.chart(width - LABEL_W - INLINE_VALUE_W - 1, 1)
                lines = [assemble(label, value, " ", *(chart[:1] or [Text("")]), no_wrap=True)]
                note = self.note()
                if note is not None:
                    lines.append(assemble(" " * LABEL_W, note, no_wrap=True))
                return lines
            value = whole_parts(value, width - LABEL_W)
            lines = [assemble(label, value, no_wrap=True)]
            note = self.note()
            if note is not None:
                lines.append(assemble(" " * LABEL_W, note, no_wrap=True))
            for row in self.chart(width - LABEL_W, self.chart_height):
                lines.append(assemble(" " * LABEL_W, row, no_wrap=True))
        return lines

    def join(self, *parts: Optional[Text | str | tuple]) -> Text:
        """Parts separated by a dim middle dot, skipping None."""
        dot = (" · ", self.st("dim"))
        out: list = []
        for p in parts:
            if p is None:
                continue
            if out:
                out.append(dot)
            out.append(p)
        return assemble(*out)

    def unknown(self, why: str = "—") -> Text:
        return text(why, self.st("dim"))


def whole_parts(value: Text, room: int) -> Text:
    """`value` within `room` cells, its ' · '-separated parts whole: the parts that do not fit
    are left out (a pane 38 cells wide showed 'KV … 19.6K/175' for 19.6K/175K tok); a first
    part wider than the room is cut with an ellipsis."""
    if value.cell_len <= room:
        return value
    plain = value.plain
    cut = plain.rfind(" · ", 0, room + 1)
    if cut > 0:
        return value[:cut]
    out = value[:max(room - 1, 0)]
    out.append("…")
    return out


def split_width(width: int, parts: Sequence[int]) -> list[int]:
    total = sum(parts)
    out = [width * p // total for p in parts]
    out[-1] += width - sum(out)
    return out

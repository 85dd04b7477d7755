"""Every use of Textual's (and rich's) private names in specmon, in this one module, behind one switch.

Why they exist: at 1 Hz with a few arms, Textual's general paths (its cache of component styles
emptied on every refresh, a widget's lines rebuilt through its content machinery, a refresh as two
messages and two task switches, a bordered row worked out again from the styles) were most of the
TUI's CPU. The fast paths below do the same work with what Textual keeps internally.

Why in one place: none of it is Textual's API, so a Textual release may change it. pyproject.toml
pins Textual exactly, and SPECMON_TEXTUAL_PUBLIC=1 in the environment (read once, at import) turns
every fast path off: specmon then uses only Textual's public API and draws the same screen (the
snapshot tests run both ways), at about twice the CPU a tick (benchmarks/tui_tick.py). A
comma-separated list of the parts below (styles, repaint, rows) turns off just those, to measure
what each saves. Two more were measured and dropped, worth nothing a tick within the spread of the
runs: a StyledWidget's lines made into Textual's render cache, and rich Text built without its
constructor.
"""

from __future__ import annotations

import os
from typing import Iterable, Optional

from rich.style import Style
from rich.segment import Segment
from textual.dom import DOMNode, NoScreen
from textual.filter import ANSIToTruecolor
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

PARTS = ("styles", "repaint", "rows")
_asked = os.environ.get("SPECMON_TEXTUAL_PUBLIC", "").strip().lower()
PUBLIC = frozenset(PARTS if _asked in ("1", "true", "yes", "on", "all") else
                   (p.strip() for p in _asked.split(",") if p.strip() in PARTS))
FAST = not PUBLIC  # every fast path on (False: at least one part uses the public API only)
FAST_STYLES, FAST_REPAINT, FAST_ROWS = (p not in PUBLIC for p in PARTS)


# -- component styles ------------------------------------------------------------------------

class KeptComponentStyles(Widget):
    """A widget's component styles kept until the stylesheet replaces them (see component_style),
    and only the component classes it has drawn with styled by the stylesheet. A base class for
    StyledWidget when FAST_STYLES; Widget itself otherwise."""

    def _get_component_classes(self) -> frozenset[str]:
        """The component classes the stylesheet works out for this widget when it styles it: the
        ones it has drawn with, not all of COMPONENT_CLASSES. The stylesheet matches its rules
        once per component class every time a widget is styled (mounted, a class of the app or
        the screen changed, a resize crossed a breakpoint); with 19 of them on ~30 panes that was
        most of the start-up, before the first frame. A component first asked for is styled
        then (_style_component)."""
        return frozenset(self.__dict__.get("_specmon_components", ()))

    def _style_component(self, component: str):
        """The component's styles, worked out now as the stylesheet would and kept with the
        others (and from now on worked out with them); KeyError for a name not declared."""
        if component not in type(self)._get_component_classes_declared():
            raise KeyError(f"No {component!r} key in COMPONENT_CLASSES")
        self.__dict__.setdefault("_specmon_components", set()).add(component)
        virtual = DOMNode(classes=component)
        virtual._attach(self)
        self.app.stylesheet.apply(virtual, animate=False)
        self._component_styles[component] = virtual.styles
        return virtual.styles

    @classmethod
    def _get_component_classes_declared(cls) -> frozenset[str]:
        declared = cls.__dict__.get("_specmon_declared")
        if declared is None:
            declared = DOMNode._get_component_classes.__func__(cls)
            cls._specmon_declared = declared
        return declared


StyledBase = KeptComponentStyles if FAST_STYLES else Widget


def component_style(widget: Widget, component: str) -> Style:
    """The component's own style (what get_component_rich_style(partial=True) gives), kept
    until the stylesheet gives the component new styles. Textual empties its own cache of
    these on every refresh() and then works out the full inherited style too (a walk up the
    DOM) just to hand back the partial one: a pane asks for ~15 styles a render, so at 1 Hz
    with three arms that was the largest single cost of a tick. The stylesheet replaces a
    component's RenderStyles object whenever it re-applies CSS (theme, classes, reload), so
    that object's identity says whether the kept style is still right."""
    if not FAST_STYLES:
        return widget.get_component_rich_style(component, partial=True)
    source = widget._component_styles.get(component)  # replaced, not changed, by the stylesheet
    if source is None:
        source = widget._style_component(component)
    cache = widget.__dict__.setdefault("_specmon_styles", {})
    kept = cache.get(component)
    if kept is not None and source is not None and kept[0] is source:
        return kept[1]
    style = widget.get_component_styles(component).partial_rich_style
    cache[component] = (source, style)
    return style


# -- repaints -------------------------------------------------------------------------------

def forget_dirty(widget: Widget) -> None:
    """A Line API widget that makes its lines itself: the regions marked dirty are drawn by this
    render (Widget.render_line would render the widget's content again for them)."""
    if FAST_ROWS:
        widget._dirty_regions.clear()


def repaint_lines(widget: Widget, regions: Iterable[Region]) -> None:
    """refresh(*regions) for a shown widget (all of it when no region), with the widget handed to
    its screen's next update at once: refresh() wakes the widget's own message loop, which on
    going idle posts an Update message to the screen, which then marks the widget for its next
    compositor pass: two messages and two task switches per widget, for the same one pass."""
    regions = list(regions)
    if not FAST_REPAINT:
        widget.refresh(*regions)
        return
    try:
        screen = widget.screen
    except NoScreen:  # not on a screen (being removed): Textual's own way
        widget.refresh(*regions)
        return
    widget._layout_cache.clear()
    widget._set_dirty(*regions)
    widget.clear_cached_dimensions()
    widget._rich_style_cache.clear()
    if screen in screen._compositor:  # as the screen's own handler of Update decides
        screen._dirty_widgets.add(widget)
        screen.check_idle()


# -- a bordered panel's rows -----------------------------------------------------------------

class ComposedRows(Widget):
    """Textual's rendering of a bordered Line API widget (the arm panel), with the content lines
    that changed since the last frame put together here: the row Textual would make (border,
    padding, the line padded to the content width), from the edges it made itself for a row of
    this widget. A base class for ArmPanel when FAST_ROWS; Widget itself otherwise.

    Why: Textual works a content row out from the widget's styles every time (border, outline,
    gutter, colours, a Style per edge) whatever changed in it; a 3-arm tick repaints ~28 such
    rows. The edges are the same on every content row while the styles, size and colours hold,
    so they are taken from a row Textual drew (after a full repaint, a restyle, a resize) and
    reused until the next. Every line still goes through Textual's own render_widget (its line
    filters: NO_COLOR, ANSI colours, dimming) as before. The subclass keeps `_strips` (its
    content lines as drawn), `_built` (what they were built for), `_frame` and
    `_filtered_styles` (None to start), `rows_composed`; tests/unit/test_tui_panel_rows.py holds
    these rows equal to Textual's own."""

    def render_lines(self, crop: Region) -> list[Strip]:
        cache = self._styles_cache
        dirty = cache._dirty_lines
        key = (self.outer_size, self._built, self.background_colors)
        frame = self._frame
        if frame is not None and frame[0] == key:
            if dirty and 0 not in dirty and self.text_selection is None:
                self._compose_rows([y for y in dirty if frame[1] <= y < frame[2]], frame)
            return super().render_lines(crop)
        # the edges are taken only from a row Textual draws in this very call
        top = self.styles.gutter.top
        drawn_now = top in crop.line_range and (top in dirty or top not in cache._cache)
        strips = super().render_lines(crop)
        self._frame = self._take_frame(key) if drawn_now else None
        return strips

    def _compose_rows(self, ys: list[int], frame: tuple) -> None:
        """The content rows ys as Textual would draw them, into its cache of the widget's rows.

        Textual then puts each row through the app's line filters. Where that is the usual one
        alone (ANSIToTruecolor: a terminal colour to the theme's, dim to a blended colour), the
        filtered row is made here as well, from each style's filtered style kept from row to row
        (a dozen styles on every row), and handed to the row as the filter's result, so the
        filter does not work it out again per segment."""
        key, top, _, left, right, fill, content_width = frame
        self._dirty_regions.clear()  # as render_line does: the rows come from the lines built
        width = key[0].width
        built = self._strips
        rows = self._styles_cache._cache
        dirty = self._styles_cache._dirty_lines
        filters = self.get_line_filters()
        mapped = None
        if len(filters) == 1 and type(filters[0]) is ANSIToTruecolor:
            the_filter, background = filters[0], key[2][1]
            kept = self._filtered_styles
            if kept is None or kept[0] is not the_filter or kept[1] != background or len(kept[2]) > 512:
                kept = self._filtered_styles = (the_filter, background, {})
            mapped = kept[2]
            truecolor, rich_background = the_filter.truecolor_style, background.rich_color
        for y in ys:
            i = y - top
            line = built[i] if i < len(built) else Strip.blank(content_width, self.visual_style.rich_style)
            row = Strip([*left, *line.adjust_cell_length(content_width, fill), *right], width)
            if mapped is not None:
                out = []
                same = True
                for text, style, control in row:
                    if style is None:
                        out.append(Segment(text, None, None))
                        same = same and control is None
                        continue
                    to = mapped.get(style)
                    if to is None:
                        to = mapped[style] = truecolor(style, rich_background)
                    same = same and control is None and to == style
                    out.append(Segment(text, to, None))
                # as Strip.apply_filter would keep it
                row._filter_cache[(the_filter, background)] = row if same else Strip(out, row.cell_length)
            rows[y] = row
            dirty.discard(y)
        self.rows_composed += len(ys)

    def _take_frame(self, key: tuple) -> Optional[tuple]:
        """The edges of a content row as Textual drew it (None where its row is more than edges
        around the line: tint, opacity, hatching, an outline, or no row drawn yet)."""
        styles = self.styles
        if (styles.tint.a or self.opacity != 1.0 or styles.text_opacity != 1.0 or styles.outline.spacing
                or (styles.has_rule("hatch") and styles.hatch != "none")):
            return None
        gutter = styles.gutter
        size = self.outer_size  # border and padding included (self.size is the content's)
        top, bottom = gutter.top, size.height - gutter.bottom
        drawn = self._styles_cache._cache.get(top)
        width = size.width
        content_width = width - gutter.left - gutter.right
        if drawn is None or bottom <= top or content_width <= 0 or drawn.cell_length != width:
            return None
        inner, _ = self._styles_cache.get_inner_outer(*key[2])
        left = list(drawn.crop(0, gutter.left))
        right = list(drawn.crop(width - gutter.right, width))
        return key, top, bottom, left, right, inner.rich_style, content_width


PanelBase = ComposedRows if FAST_ROWS else Widget

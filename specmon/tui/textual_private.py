"""Every use of Textual's (and rich's) private names in specmon, in this one module, behind one switch.

Why they exist: at 1 Hz with a few arms, Textual's general paths (its cache of component styles
emptied on every refresh, a widget's lines rebuilt through its content machinery, a refresh as two
messages and two task switches, a bordered row worked out again from the styles) were most of the
TUI's CPU. The fast paths below do the same work with what Textual keeps internally.

Why in one place: none of it is Textual's API, so a Textual release may change it. pyproject.toml
pins Textual exactly, and SPECMON_TEXTUAL_PUBLIC=1 in the environment (read once, at import) turns
every fast path off: specmon then uses only Textual's public API and draws the same screen (the
snapshot tests run both ways), at about twice the CPU a tick (benchmarks/tui_tick.py). A
comma-separated list of the parts below (styles, repaint, rows, table) turns off just those, to measure
what each saves. Two more were measured and dropped, worth nothing a tick within the spread of the
runs: a StyledWidget's lines made into Textual's render cache, and rich Text built without its
constructor.
"""

from __future__ import annotations

import os
from typing import Iterable, Optional

from rich.style import Style
from rich.segment import Segment
from rich.text import Text
from textual.dom import DOMNode, NoScreen
from textual.filter import ANSIToTruecolor
from textual.geometry import Region, Spacing
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey
from textual.coordinate import Coordinate
from rich.cells import cell_len

PARTS = ("styles", "repaint", "rows", "table")
_asked = os.environ.get("SPECMON_TEXTUAL_PUBLIC", "").strip().lower()
PUBLIC = frozenset(PARTS if _asked in ("1", "true", "yes", "on", "all") else
                   (p.strip() for p in _asked.split(",") if p.strip() in PARTS))
FAST = not PUBLIC  # every fast path on (False: at least one part uses the public API only)
FAST_STYLES, FAST_REPAINT, FAST_ROWS, FAST_TABLE = (p not in PUBLIC for p in PARTS)


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


# -- the fleet table -------------------------------------------------------------------------

def put_cells(table, writes: list[tuple[str, str, object]], refresh_rows) -> None:
    """(worker, column key, new cell) into the table. DataTable.update_cell refreshes the whole
    table for each cell, so every visible line was drawn again though most rows had not changed:
    here the cells go into the table's data directly and `refresh_rows(names)` repaints only
    their rows."""
    if not FAST_TABLE:
        for name, key, value in writes:
            table.update_cell(RowKey(name), ColumnKey(key), value)
        return
    changed: dict[str, None] = {}
    for name, key, value in writes:
        table._data[RowKey(name)][ColumnKey(key)] = value
        changed[name] = None
    table._update_count += 1  # DataTable's own caches (the lines of a changed row) key on it
    refresh_rows(list(changed))


class KeptTableLines(DataTable):
    """DataTable with a cell's, a row's and a line's rendering kept while the table holds the same
    cell objects (FleetTable.redraw replaces only the cells that changed): DataTable keys its own
    caches on a counter that every cell update bumps, so with 64 workers every visible cell was
    rendered again every tick. Also keeps the cursor's row clear of the table's hint line
    (FleetTable.rows_below). A base class for FleetTable when FAST_TABLE; DataTable otherwise."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._cell_lines: dict[tuple, tuple] = {}  # (row key, column key) -> (value, signature, lines)
        self._by_look: dict[tuple, list] = {}  # a cell's text and look -> its rendered lines
        self._row_lines: dict[int, tuple] = {}  # y -> (the row's cells, signature, its Strip)
        self._row_cells: dict[tuple, tuple] = {}  # (row key, line) -> (signature, cells, fixed, scrollable)
        self._here: dict[tuple, Style] = {}  # (row, column, base style) -> the meta a click there reports
        self._frame_styles: dict = {}  # the styles of the frame being drawn (render_lines)
        self._framing = False  # render_lines is running (what _frame_styles holds is this frame's)
        self._placed_styles: dict[tuple, Style] = {}  # (a cell's style, its place's meta) -> the two

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False):
        """DataTable's own cache of rendered cells is keyed on a counter that every update_cell
        bumps, so one changed cell had every visible cell rendered again (64 workers: ~430 a
        tick, most of the TUI's CPU). Here a cell's rendering is kept while the table holds the
        same value object for it (redraw replaces only the cells that changed) and everything
        else DataTable keys on is the same."""
        if row_index < 0 or column_index < 0:  # the header and row labels: DataTable's way
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        value = self._data[row_key][column_key]
        sig = (row_index, column_index, base_style, width, cursor, hover, self._show_hover_cursor,
               self._pseudo_class_state, self.show_cursor)
        kept = self._cell_lines.get((row_key, column_key))
        if kept is not None and kept[0] is value and kept[1] == sig:
            return kept[2]
        # With the load moving, most figures change every tick, but a cell reads like many others
        # ('up', '1', '—', '5.6'): a cell is rendered once per text and look, and another cell
        # reading the same gets those lines with its own position in their meta (what a click on
        # it reports), as DataTable would have made them. A new figure of one style, no spans and
        # as many cells as characters lays out as any other of its length does (left in its
        # column after the padding): its lines are those of a figure seen before with the text
        # put in its place, not rendered through the console again (~0.3 ms a cell, and the
        # scraped workers bring new figures every tick).
        plain = getattr(value, "plain", None)
        by_length = (isinstance(value, Text) and not value.spans and bool(plain) and "\n" not in plain
                     and value.justify is None and cell_len(plain) == len(plain))
        look = (type(value), by_length, len(plain) if by_length else getattr(value, "plain", value),
                getattr(value, "style", None), tuple(getattr(value, "spans", ())), base_style, width, cursor,
                hover, self._show_hover_cursor, self._pseudo_class_state, self.show_cursor,
                column_index < self.fixed_columns, self.rows[row_key].height)
        shared = self._by_look.get(look)
        lines = None
        if shared is not None:
            seen, seen_plain = shared
            # the meta DataTable gives the cell: its base style's (the fixed column's 'fixed')
            # and the cell's place; built once per place (a meta style costs more than the rest)
            here = self._here.get((row_index, column_index, base_style))
            if here is None:
                here = self._here[(row_index, column_index, base_style)] = Style.from_meta(
                    {**base_style.meta, "row": row_index, "column": column_index})
            if seen_plain == plain:
                lines = [[Segment(seg.text, self._placed(seg.style, here) if seg.style else seg.style,
                                  seg.control) for seg in line] for line in seen]
            else:
                full = "".join(seg.text for seg in seen[0]) if len(seen) == 1 else ""
                at = self.cell_padding
                if full[at:at + len(plain)] == seen_plain:
                    text, lines, x = full[:at] + plain + full[at + len(plain):], [[]], 0
                    for seg in seen[0]:
                        n = len(seg.text)
                        lines[0].append(Segment(text[x:x + n], self._placed(seg.style, here)
                                                if seg.style else seg.style, seg.control))
                        x += n
                else:
                    lines = None
        if lines is None:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            if len(self._by_look) > 20_000:  # new figures every tick: forget the old looks
                self._by_look.clear()
            self._by_look[look] = (lines, plain)
        self._cell_lines[(row_key, column_key)] = (value, sig, lines)
        return lines

    def _placed(self, style: Style, here: Style) -> Style:
        """A shared cell's segment style with this place's meta (style + meta, built once each)."""
        got = self._placed_styles.get((style, here))
        if got is None:
            if len(self._placed_styles) > 20_000:
                self._placed_styles.clear()
            got = self._placed_styles[(style, here)] = style.clear_meta_and_links() + here
        return got

    def _render_line_in_row(self, row_key, line_no: int, base_style: Style, cursor_location, hover_location):
        """A row's rendered cells, DataTable's way, with only the cells that changed rendered
        again: every row's age moves every tick, and rendering a whole row for it (13 cells, the
        row's styles looked up again) was most of what the table cost. The rest of the row is
        kept while nothing it depends on (its place, cursor, hover, widths, focus) moved."""
        if (row_key is self._header_row_key or row_key not in self._data or self._labelled_row_exists
                or self.cursor_type != "row"):
            return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)
        columns, widths = self._columns_and_widths()
        row_index = self._row_locations.get(row_key)
        # a whole row's cursor: every cell of the row is highlighted, or none (where the cursor
        # is on another row matters not, so moving it leaves the other rows' cells kept)
        cursor = self._should_highlight(cursor_location, Coordinate(row_index, 0), "row")
        hover = self._should_highlight(hover_location, Coordinate(row_index, 0), "row")
        sig = (base_style, row_index, cursor, hover, self.show_cursor, self._show_hover_cursor,
               self._pseudo_class_state, widths, self.size.width, self.fixed_columns)
        data = self._data[row_key]
        cells = [data[c.key] for c in columns]
        kept = self._row_cells.get((row_key, line_no))
        if kept is None or kept[0] != sig or len(kept[1]) != len(cells):
            fixed, scrollable = super()._render_line_in_row(row_key, line_no, base_style, cursor_location,
                                                            hover_location)
            self._row_cells[(row_key, line_no)] = (sig, cells, fixed, scrollable)
            return fixed, scrollable
        _, was, fixed, scrollable = kept
        changed = [i for i, (a, b) in enumerate(zip(was, cells)) if a is not b]
        if not changed:
            return fixed, scrollable
        fixed, scrollable = list(fixed), list(scrollable)
        row_style = self._get_row_style(row_index, base_style)
        fixed_style = None
        for i in changed:
            scrollable[i] = self._render_cell(row_index, i, row_style, widths[i], cursor, hover)[line_no]
            if i < self.fixed_columns:
                if fixed_style is None:
                    fixed_style = (self.get_component_styles("datatable--fixed").rich_style
                                   + Style.from_meta({"fixed": True}))
                fixed[i] = self._render_cell(row_index, i, fixed_style, widths[i], cursor, hover)[line_no]
        self._row_cells[(row_key, line_no)] = (sig, cells, fixed, scrollable)
        return fixed, scrollable

    def render_lines(self, crop):
        # The styles a line is drawn in are the same for every line of a frame; DataTable looks
        # them up again for each line (the widget's and the row's: ~2 of its ~30 lines' ms), and
        # so are the columns and their widths (13 columns measured again for each line)
        self._frame_styles = {}
        self._framing = True
        try:
            return super().render_lines(crop)
        finally:
            self._framing = False

    def _columns_and_widths(self) -> tuple[list, tuple[int, ...]]:
        """The ordered columns and their render widths: once a frame while render_lines runs."""
        got = self._frame_styles.get("columns") if self._framing else None
        if got is None:
            columns = self.ordered_columns
            got = (columns, tuple(c.get_render_width(self) for c in columns))
            if self._framing:
                self._frame_styles["columns"] = got
        return got


    def _get_fixed_offset(self) -> Spacing:
        # the cursor's row is scrolled clear of the hint line, not under it
        offset = super()._get_fixed_offset()
        return Spacing(offset.top, 0, 1, offset.left) if self.rows_below() else offset


    def _get_row_style(self, row_index: int, base_style: Style) -> Style:
        if row_index < self.fixed_rows or not self.zebra_stripes:
            return super()._get_row_style(row_index, base_style)
        key = (row_index % 2 if row_index >= 0 else -1, base_style, self._pseudo_class_state)
        style = self._frame_styles.get(key)
        if style is None:
            style = self._frame_styles[key] = super()._get_row_style(row_index, base_style)
        return style

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style):
        """DataTable renders a line again whenever any cell of the table changed (its line cache
        is keyed on the same counter as its cells): with 64 workers, every visible row every
        tick. A row's line is kept here while the row holds the same cell objects (redraw
        replaces only the cells that changed) and nothing else the line depends on moved."""
        try:
            row_key, line_no = self._get_offsets(y)
        except LookupError:
            return super()._render_line(y, x1, x2, base_style)
        columns, widths = self._columns_and_widths()
        if row_key is self._header_row_key:
            # the header too: its labels stay while the columns do (DataTable rendered its 13
            # cells through the console again every tick, on the counter every cell update bumps)
            cells = tuple(c.label for c in columns)
        elif row_key not in self._data:
            return super()._render_line(y, x1, x2, base_style)
        else:
            cells = tuple(self._data[row_key].values())
        sig = (x1, x2, self.size.width, self.cursor_coordinate, self.hover_coordinate, base_style, self.cursor_type,
               self._show_hover_cursor, self._pseudo_class_state, self.show_cursor, row_key, line_no,
               self._row_locations.get(row_key), widths, self.fixed_columns)
        kept = self._row_lines.get(y)
        if kept is not None and kept[1] == sig and len(kept[0]) == len(cells) and all(
                a is b for a, b in zip(kept[0], cells)):
            return kept[2]
        strip = super()._render_line(y, x1, x2, base_style)
        self._row_lines[y] = (cells, sig, strip)
        return strip

    def clear(self, columns: bool = False):
        self._cell_lines.clear()
        self._row_lines.clear()
        self._row_cells.clear()
        self._here.clear()
        return super().clear(columns)


    def render_line(self, y: int):
        if self.fixed_rows:
            return super().render_line(y)
        base = self._frame_styles.get("base")
        if base is None:
            base = self._frame_styles["base"] = self.rich_style
        scroll_x, scroll_y = self.scroll_offset
        if y >= (self.header_height if self.show_header else 0):
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + self.size.width, base)


TableBase = KeptTableLines if FAST_TABLE else DataTable

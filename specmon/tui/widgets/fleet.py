"""Fleets: a header line per gateway or Prometheus fleet, and the fleet table (one row per
worker) that replaces the arm panels when there are more arms than fit side by side.

The table sorts on any column (click its header, or `o` to cycle), pages with the usual keys,
and `enter`/`d` on a row opens that worker's full panes (the detail screen)."""

from __future__ import annotations

from typing import Optional

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.geometry import Region, Spacing
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from specmon.analysis.ranks import RankImbalance, rank_imbalance
from specmon.model import FleetStatus, Sample, kv_usage_of
from specmon.tui import fmt
from specmon.tui.state import ArmState, SessionState
from specmon.tui.widgets.base import StyledWidget

FLEET_TABLE_ABOVE = 4  # more arms than this: the table instead of the panels

# A gateway's workers past a few are scraped in turn, each every ROTATION_S (session/live.py's
# FLEET_SCRAPE_EVERY_S; a test keeps the two equal: importing the session here would slow every
# replay's start), and a Prometheus fleet's series are as old as its scrape interval at most. An
# age within that cycle (and a tick's slack) is the fleet working as it should: the header says
# the cycle once, and the age column reads "—" for those rows and shows only the ages past it,
# the workers an operator should look at. (Shown on every row, the age moved every second on
# every row, which had the whole table drawn again each tick for figures that had not changed.)
ROTATION_S = 4.0
AGE_SLACK_S = 1.0


class FleetHeader(StyledWidget):
    """'gw (gateway) 3/4 workers healthy · 12.5 req/s routed · policy cache_aware · from workers'."""

    DEFAULT_CSS = "FleetHeader { height: auto; display: none; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session

    def render(self) -> Text:
        with self.session.lock:
            fleets = list(self.session.fleets)
        width = self.size.width or 80
        t = Text()
        for i, f in enumerate(fleets):
            if i:
                t.append("\n")
            t.append_text(self.line(f, width))
        return t

    def line(self, f: FleetStatus, width: int = 10_000) -> Text:
        """The fleet's line in `width` cells: its items in order, an item that does not fit left
        out whole (never cut inside a word); the name and the health first."""
        t = Text()
        t.append(f"{f.name} ", style=self.st("value"))
        t.append(f"({f.kind}) ", style=self.st("dim"))
        if not f.up:
            t.append("DOWN ", style=self.st("bad"))
            t.append(f.reason or "no reason given", style=self.st("bad"))
            return t
        items: list[Text] = []
        if f.total is not None:
            healthy = "?" if f.healthy is None else str(f.healthy)
            style = "good" if f.healthy == f.total else "warn"
            items.append(Text(f"{healthy}/{f.total} workers healthy", style=self.st(style)))
        if f.routed_req_s is not None:
            items.append(Text(f"{f.routed_req_s:.1f} req/s routed", style=self.st("unit")))
        if f.policy:
            items.append(Text(f"policy {f.policy}", style=self.st("unit")))
        if f.pd_ttft_s is not None:  # a PD gateway's own timing (smg_pd_*)
            prefill = f" (prefill {f.pd_prefill_s * 1e3:,.0f} ms)" if f.pd_prefill_s is not None else ""
            items.append(Text(f"PD TTFT {f.pd_ttft_s * 1e3:,.0f} ms{prefill}", style=self.st("unit")))
        if f.scrape_interval_s is not None:
            items.append(Text(f"scraped every {f.scrape_interval_s:g} s", style=self.st("unit")))
        elif self._in_turn(f):
            items.append(Text(f"workers scraped in turn, each every {ROTATION_S:g} s", style=self.st("unit")))
        if f.source:
            items.append(Text(f"figures from {f.source}", style=self.st("dim")))
        open_circuits = [w.arm for w in f.workers if w.circuit and w.circuit != "closed"]
        if open_circuits:
            items.append(Text(f"circuit open: {', '.join(open_circuits)}", style=self.st("warn")))
        if f.reason:
            items.append(Text(f.reason, style=self.st("dim")))
        first = True
        for item in items:
            sep = 0 if first else 3
            if t.cell_len + sep + item.cell_len > width and not first:
                continue
            if not first:
                t.append(" · ", style=item.style)
            t.append_text(item)
            first = False
        return t

    def _in_turn(self, f: FleetStatus) -> bool:
        """Are the fleet's workers scraped in turn (a row repeating an earlier scrape, with its age)?"""
        with self.session.lock:
            for w in f.workers:
                arm = self.session.arms.get(w.arm)
                if arm is not None and arm.last is not None and arm.last.stale_s is not None:
                    return True
        return False

    def update_visibility(self) -> None:
        with self.session.lock:
            show = bool(self.session.fleets)
        if self.display != show:
            self.display = show  # (a layout pass of its own)
        self.update_view()


# (key, header) of the table's columns; the key also names the sort
COLUMNS = [
    ("worker", "worker"), ("state", "state"), ("role", "role"), ("running", "run"), ("queued", "queue"),
    ("kv", "KV %"), ("tok_s", "tok/s"), ("ttft_p50", "TTFT p50"), ("ttft_p99", "p99"), ("accept", "accept"),
    ("active", "routed"), ("ranks", "DP imbalance"), ("stale", "age"),
    # running now of the observed knee, and the room before it (analysis/observed.py)
    ("knee", "run/knee +room"),
]


# Where the table is narrower than its columns, these give way whole, in this order (the worker
# never does): the least telling first, as the arms' level table drops its columns.
DROP_FIRST = ("ranks", "role", "active", "stale", "ttft_p99", "accept", "queued", "knee", "kv", "ttft_p50", "tok_s",
              "running")
CELL_PADDING = 1  # DataTable's, each side of a cell


def shown_columns(widths: dict[str, int], room: int) -> list[str]:
    """The columns (keys, in table order) that fit `room` cells, given each one's widest cell."""
    keys = [k for k, _ in COLUMNS]
    for drop in (None, *DROP_FIRST):
        if drop is not None:
            keys.remove(drop)
        if sum(widths[k] + 2 * CELL_PADDING for k in keys) <= room:
            break
    return keys


def _num(v: Optional[float], spec: str) -> str:
    return "—" if v is None else spec.format(v)


def knee_cell(arm: ArmState) -> tuple[Optional[int], str]:
    """(headroom, what the knee column reads) for one worker: "34/46 +12" (running now of its
    observed knee, room for that many more), or "—" and a word for why there is no knee yet:
    "light" (running never went above 3), "rising" (throughput still grows and nothing queues
    up to the highest count seen) or "at cap" (running reached the request cap, too little
    queued). The headroom is the sort key: the fullest workers first."""
    k = arm.observed
    if k is None:
        return None, "—"
    if k.concurrency is None:
        light = k.running_max is None or "never above" in k.reason or "no running" in k.reason
        if light:
            return None, "— light"
        return None, "— at cap" if "past the cap" in k.reason else "— rising"
    # running from this tick's sample: the knee itself is recomputed every few seconds only
    running = arm.last.running_reqs if arm.last is not None else None
    if running is None:
        running = k.running_now
    if running is None:
        return k.headroom, f"{k.concurrency}"
    room = max(0, k.concurrency - running)
    return room, f"{running}/{k.concurrency} +{room}"


def row_values(arm: ArmState, active: Optional[int], cycle: float = ROTATION_S) -> dict[str, object]:
    """The sortable value of each column for one worker (None sorts last); `cycle`: the seconds
    its fleet's figures may be old by design (ROTATION_S above)."""
    s: Optional[Sample] = arm.last
    cap = arm.info.max_running_requests if arm.info is not None else None  # a rank's cap (SGLang's is per rank)
    im = rank_imbalance(s.ranks, cap) if s is not None and s.ranks else None
    room, knee = knee_cell(arm)
    return {
        "worker": arm.name, "state": (s.state if s is not None else "starting"), "role": arm.role or "",
        "running": s.running_reqs if s else None, "queued": s.queued_reqs if s else None,
        "kv": kv_usage_of(s.kv_usage, s.kv_used_tokens, s.kv_capacity_tokens) if s else None,
        "tok_s": s.gen_tok_s if s else None, "ttft_p50": s.ttft_p50_s if s else None,
        "ttft_p99": s.ttft_p99_s if s else None, "accept": s.accept_length if s else None,
        "active": active, "ranks": im, "stale": s.stale_s if s else None, "cycle": cycle,
        "knee": room, "knee_text": knee,
    }


_TEXTS: dict[tuple[str, str], Text] = {}


def _text(plain: str, style: str = "") -> Text:
    """One Text per reading and style, shared by every cell that reads the same: the table asks
    for 64 rows x 13 cells a tick, most of them what they read a tick before (or what another row
    reads), and building them anew was most of what redrawing the table cost. (Never mutated:
    the table only reads its cells.)"""
    t = _TEXTS.get((plain, style))
    if t is None:
        if len(_TEXTS) > 20_000:  # figures move: forget the old ones now and then
            _TEXTS.clear()
        t = _TEXTS[(plain, style)] = Text(plain, style=style)
    return t


def row_cells(v: dict[str, object]) -> list[Text]:
    im = v["ranks"]
    if im is None:
        ranks = _text("—")
    else:
        figure = _num(im.running_max_over_mean, "{:.1f}x")
        ranks = _text(f"⚠ {figure} {im.callout}" if im.callout else f"{figure} ({im.ranks} ranks)",
                     style="bold" if im.callout else "")
    state = str(v["state"])
    age = age_shown(v)
    return [
        _text(str(v["worker"]), style="bold"),
        _text(state.upper() if state != "up" else "up", style="" if state == "up" else "bold reverse"),
        _text(str(v["role"]) or "—"),
        _text(_num(v["running"], "{:d}")), _text(_num(v["queued"], "{:d}")),
        _text(_num(None if v["kv"] is None else v["kv"] * 100, "{:.1f}")),
        _text(_num(v["tok_s"], "{:.0f}")),
        _text(fmt.secs(v["ttft_p50"]) if v["ttft_p50"] is not None else "—"),
        _text(fmt.secs(v["ttft_p99"]) if v["ttft_p99"] is not None else "—"),
        _text(_num(v["accept"], "{:.2f}")), _text(_num(v["active"], "{:d}")), ranks,
        _text(age, style="bold") if age else _text("—"),
        _text(str(v["knee_text"]), style="bold" if v["knee"] == 0 else ""),
    ]


def age_shown(v: dict[str, object]) -> Optional[str]:
    """The age a row shows: only past its fleet's cycle (ROTATION_S above), else None ("—")."""
    stale = v["stale"]
    if stale is None or stale <= v.get("cycle", ROTATION_S) + AGE_SLACK_S:
        return None
    return f"{stale:.0f} s"


def _shown_values(v: dict[str, object]) -> tuple:
    """What a row's cells are made of: its values (in row_values' order) with the age as shown
    (an age within the cycle moves every tick and shows the same)."""
    values = tuple(v.values())
    return (*values[:_STALE_AT], age_shown(v), *values[_STALE_AT + 1:])


_STALE_AT = list(row_values(ArmState(name="", index=0), None)).index("stale")


def _sort_key(value: object) -> tuple:
    if value is None:
        return (1, 0)
    if isinstance(value, RankImbalance):  # the worse, the higher
        return (0, value.running_max_over_mean or 0.0)
    return (0, value) if isinstance(value, (int, float)) else (0, str(value))


class FleetTable(DataTable):
    """One row per worker; `o` cycles the sort column, `O` reverses it."""

    BINDINGS = [("o", "cycle_sort", "sort"), Binding("O", "reverse_sort", "reverse", show=False)]  # footer room at 80 columns
    DEFAULT_CSS = "FleetTable { height: auto; max-height: 70%; display: none; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, fixed_columns=1, **kw)  # the worker stays when scrolled right
        self.session = session
        self.can_focus = False  # until the app shows it (fleet mode)
        self.sort_column = "worker"
        self.sort_reverse = False
        self._cells: dict[str, list[Text]] = {}  # the cells the table holds, by worker
        self._memo: dict[str, tuple] = {}  # worker -> (its values as shown, its cells, their widths) last redraw
        self._order: list[str] = []
        self._widths: list[int] = []
        self._shown: list[str] = []  # the column keys the table holds
        self._cell_lines: dict[tuple, tuple] = {}  # (row key, column key) -> (value, signature, lines)
        self._by_look: dict[tuple, list] = {}  # a cell's text and look -> its rendered lines
        self._row_lines: dict[int, tuple] = {}  # y -> (the row's cells, signature, its Strip)
        self._row_cells: dict[tuple, tuple] = {}  # (row key, line) -> (signature, cells, fixed, scrollable)
        self._here: dict[tuple, Style] = {}  # (row, column, base style) -> the meta a click there reports
        self._frame_styles: dict = {}  # the styles of the frame being drawn (render_lines)
        self._framing = False  # render_lines is running (what _frame_styles holds is this frame's)
        self._placed_styles: dict[tuple, Style] = {}  # (a cell's style, its place's meta) -> the two

    def on_resize(self) -> None:
        self.call_after_refresh(self.redraw)  # the columns that fit the new width

    def _room(self) -> int:
        """Cells across for the columns: the table's width less a vertical scrollbar's (it shows
        as soon as the rows pass its height)."""
        return self.size.width - self.styles.scrollbar_size_vertical

    def selected_arm(self) -> Optional[str]:
        if self.row_count == 0:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return None if row_key is None else str(row_key.value)

    def redraw(self) -> None:
        """The rows as the session has them now. Only the cells whose text changed are handed to
        the table, the rows are re-ordered in place when the sort order changed, and the table is
        rebuilt only when workers joined or left: clearing and refilling 64 rows every tick had
        the table measure and render every visible cell again (and sent the view back to the top)."""
        with self.session.lock:
            names = self.session.arm_names()
            active = {w.arm: w.active_requests for f in self.session.fleets for w in f.workers}
            cycles = {f.name: f.scrape_interval_s or ROTATION_S for f in self.session.fleets}
            values = {n: row_values(a, active.get(n), cycles.get(a.fleet, ROTATION_S))
                      for n in names for a in (self.session.arms[n],)}
        keep = self.selected_arm()
        order = sorted(names, key=lambda n: _sort_key(values[n][self.sort_column]), reverse=self.sort_reverse)
        # A row whose values are those of the last redraw keeps its cells and their widths (most
        # rows of a fleet scraped in turn, on any tick)
        memo, every, cell_widths = {}, {}, []
        for n in names:
            key = _shown_values(values[n])
            was = self._memo.get(n)
            if was is not None and was[0] == key:
                memo[n] = was
            else:
                c = row_cells(values[n])
                memo[n] = (key, c, tuple(x.cell_len for x in c))
            every[n] = memo[n][1]
            cell_widths.append(memo[n][2])
        self._memo = memo
        # A column is as wide as its widest cell; the columns that do not fit the width give way
        # whole. When either changes the table is built again, as it was every tick before
        # (DataTable's own width update measures the whole column again for every cell that
        # narrowed: far slower than building it).
        columns = list(zip(*cell_widths)) or [()] * len(COLUMNS)
        all_widths = {key: max((len(header), *column)) for (key, header), column in zip(COLUMNS, columns)}
        shown = shown_columns(all_widths, self._room()) if self.size.width else [k for k, _ in COLUMNS]
        index = {k: i for i, (k, _) in enumerate(COLUMNS)}
        cells = {n: [c[index[k]] for k in shown] for n, c in every.items()}
        widths = [all_widths[k] for k in shown]
        if (set(cells) != set(self._cells) or self.row_count != len(cells) or widths != self._widths
                or shown != self._shown):
            self.clear(columns=shown != self._shown)
            if shown != self._shown:
                headers = dict(COLUMNS)
                for key in shown:
                    self.add_column(headers[key], key=key)
            for name in order:
                self.add_row(*cells[name], key=name)
            self._cells, self._order, self._widths, self._shown = cells, order, widths, shown
            if keep in values:
                self.move_cursor(row=order.index(keep))
            return
        # The changed cells go into the table's data directly and only their rows are refreshed:
        # DataTable.update_cell refreshes the whole table for each cell, so every visible line was
        # drawn again though most rows had not changed (a row's cells are shared Texts, _text:
        # the same reading is the same object).
        changed: list[str] = []
        for name, new in cells.items():
            old = self._cells[name]
            row = None
            for i, (key, was, now) in enumerate(zip(shown, old, new)):
                if was is not now:
                    if row is None:
                        row = self._data[RowKey(name)]
                    row[ColumnKey(key)] = now
                    old[i] = now  # the table holds this object now: unchanged cells keep theirs
            if row is not None:
                changed.append(name)
        if changed:
            self._update_count += 1  # DataTable's own caches (the lines of a changed row) key on it
            self._refresh_rows(changed)
        if order != self._order:
            rank = {n: i for i, n in enumerate(order)}
            self.sort("worker", key=lambda cell: rank[cell.plain])
            self._order = order
            if keep in rank:
                self.move_cursor(row=rank[keep])

    def _refresh_rows(self, names: list[str]) -> None:
        """Repaint the lines of these rows that are on screen, not the whole table."""
        scroll_x, scroll_y = self.scroll_offset
        top = self.header_height if self.show_header else 0
        ys, y = {}, top
        for row in self.ordered_rows:
            ys[row.key] = (y, row.height)
            y += row.height
        width = self.size.width
        for name in names:
            at = ys.get(RowKey(name))
            if at is None:
                continue
            y, h = at[0] - scroll_y, at[1]
            if y + h > top and y < self.size.height:
                self.refresh(Region(0, y, width, h))

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

    def rows_below(self) -> int:
        """Workers under the view, past the hint line that takes the table's last line while any
        are (0 when every row below the view's top is on screen)."""
        top = self.header_height if self.show_header else 0
        room = self.size.height - top  # lines for rows (every row is one line)
        first = int(self.scroll_offset.y)
        if room < 2 or self.row_count <= first + room:
            return 0
        return self.row_count - first - (room - 1)

    def hint(self) -> str:
        n = self.rows_below()
        if not n:
            return ""
        return f"{n} more worker{'s' if n != 1 else ''} below: ↓ PgDn ctrl+End"

    def _get_fixed_offset(self) -> Spacing:
        # the cursor's row is scrolled clear of the hint line, not under it
        offset = super()._get_fixed_offset()
        return Spacing(offset.top, 0, 1, offset.left) if self.rows_below() else offset

    def render_line(self, y: int):
        if y == self.size.height - 1 and y > 0:
            # A terminal of 24 lines holds ~12 of 64 workers: the last line says how many more
            # there are and how to get to them, as a pager would
            hint = self.hint()
            if hint:
                width = self.size.width
                text = f" {hint}"[:width]
                style = self.rich_style + Style(bold=True, reverse=True)
                return Strip([Segment(text + " " * (width - cell_len(text)), style)], width)
        if self.fixed_rows:
            return super().render_line(y)
        base = self._frame_styles.get("base")
        if base is None:
            base = self._frame_styles["base"] = self.rich_style
        scroll_x, scroll_y = self.scroll_offset
        if y >= (self.header_height if self.show_header else 0):
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + self.size.width, base)

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

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        self.sort_reverse = not self.sort_reverse if key == self.sort_column else False
        self.sort_column = key
        self.redraw()

    def action_cycle_sort(self) -> None:
        keys = self._shown or [k for k, _ in COLUMNS]  # the columns on screen
        if self.sort_column not in keys:
            self.sort_column = keys[0]
        self.sort_column = keys[(keys.index(self.sort_column) + 1) % len(keys)]
        self.redraw()

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.redraw()

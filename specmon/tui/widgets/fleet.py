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
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from specmon.analysis.ranks import RankImbalance, rank_imbalance
from specmon.model import FleetStatus, Sample, kv_usage_of
from specmon.tui import fmt, textual_private
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


class FleetTable(textual_private.TableBase):
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
        # Only the cells that changed are handed over (a row's cells are shared Texts, _text: the
        # same reading is the same object); textual_private.put_cells repaints only their rows.
        writes: list[tuple[str, str, Text]] = []
        for name, new in cells.items():
            old = self._cells[name]
            for i, (key, was, now) in enumerate(zip(shown, old, new)):
                if was is not now:
                    writes.append((name, key, now))
                    old[i] = now  # the table holds this object now: unchanged cells keep theirs
        if writes:
            textual_private.put_cells(self, writes, self._refresh_rows)
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
        return super().render_line(y)

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

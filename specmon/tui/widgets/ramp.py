"""The ramp: current level, progress and ETA; the per-level table; the two curves per arm."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll

from specmon.tui import fmt
from specmon.tui.chart import arm_glyph, bar
from specmon.tui.state import SessionState
from specmon.tui.widgets.base import StyledWidget
from specmon.tui.widgets.plot import LevelPlot


class RampProgress(StyledWidget):
    DEFAULT_CSS = "RampProgress { height: 1; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.paused = False

    def render(self) -> Text:
        """Its items whole: the bar shortens below 100 columns, and the items after the level's
        time (ETA, the requests done) are left out where they do not fit; the ramp's end or a
        pause is kept before either."""
        s = self.session
        width = max(self.size.width, 40)
        t = Text(no_wrap=True, overflow="ellipsis")
        with s.lock:
            lv, pr = s.level, s.progress
            if lv is None:
                t.append("no ramp in this session" if not s.ramp_started else "", style=self.st("dim"))
                return t
            total = s.levels_total or "?"
            t.append(f"level {lv.level + 1}/{total}", style=self.st("value"))
            if lv.offered_rate is not None:  # an open-loop level offers a rate
                t.append("  r ", style=self.st("unit"))
                t.append(f"{lv.offered_rate:g}", style=self.st("value"))
                t.append("/s", style=self.st("unit"))
                if pr is not None and pr.level == lv.level and pr.in_flight:
                    t.append("  in flight", style=self.st("unit"))
                    t.append(" " + " ".join(str(n) for n in pr.in_flight.values()), style=self.st("value"))
            else:
                t.append("  C ", style=self.st("unit"))
                t.append(str(lv.offered_concurrency), style=self.st("value"))
            elapsed = pr.elapsed_s if pr is not None and pr.level == lv.level else 0.0
            planned = lv.planned_s
            frac = min(elapsed / planned, 1.0) if planned else None
            filled, empty = bar(frac, 20 if width >= 100 else 10)
            t.append("  ")
            t.append(filled, style=self.st("bar"))
            t.append(empty, style=self.st("bar-empty"))
            t.append(f" {fmt.duration(elapsed)}", style=self.st("value"))
            t.append(f"/{fmt.duration(planned)}" if planned else "", style=self.st("unit"))
            tail: list[tuple[int, Text]] = []  # (priority: lower is kept first, the item), in order
            if pr is not None and pr.eta_s is not None and s.ramp_finished is None:
                tail.append((1, Text.assemble(("  ETA ", self.st("unit")), (fmt.duration(pr.eta_s), self.st("value")))))
            if pr is not None and pr.done_requests:
                done = Text("  done", style=self.st("unit"))
                for arm in s.arms.values():
                    if arm.name in pr.done_requests:
                        done.append(f" {arm_glyph(arm.index)}", style=self.arm_style(arm.index))
                        done.append(f"{pr.done_requests[arm.name]}", style=self.st("value"))
                tail.append((2, done))
            if s.ramp_finished is not None:
                tail.append((0, Text(f"  ramp {s.ramp_finished}",
                                     style=self.st("warn" if s.ramp_finished != "done" else "good"))))
            elif self.paused:
                tail.append((0, Text("  PAUSED", style=self.st("warn"))))
            room = width - t.cell_len
            keep = set()
            for i, (_, x) in sorted(enumerate(tail), key=lambda ix: ix[1][0]):
                if x.cell_len <= room:
                    keep.add(i)
                    room -= x.cell_len
            for i, (_, x) in enumerate(tail):
                if i in keep:
                    t.append_text(x)
        t.truncate(width, overflow="ellipsis")
        return t


# (header, width, right-aligned); the arm column takes what is left up to its widest name.
COLUMNS = (("C", 4, True), ("ach C", 6, True), ("tok/s", 7, True), ("tok/s/u", 8, True),
           ("TTFT50", 8, True), ("TTFT99", 8, True), ("TPOT", 7, True), ("acc", 5, True),
           ("ok/fail", 8, True), ("knee", 9, False))
TABLE_W = 4 + sum(w for _, w, _ in COLUMNS)
# A ramp of request rates: its first column is the rate ("4/s"), wider.
RATE_COLUMNS = (("rate", 7, True),) + COLUMNS[1:]
# Narrower than the table: these columns go first, in this order, so that the arms' names and
# the knee marks stay whole (the achieved concurrency is flagged on the row when it falls short).
DROP_FIRST = ("ach C", "tok/s/u", "TPOT", "TTFT99")
KNEE_MARK_W = len(" ◆ queueing*")


class LevelTable(StyledWidget):
    """Fixed-width per-level table (one row per arm per level, a rule between levels).

    With `tail` set (the app's compact mode, where the table has only the rows left under the
    arms) it shows the newest levels that fit its height, whole, under the header, and says how
    many earlier levels `r` shows."""

    DEFAULT_CSS = "LevelTable { height: auto; }"

    def __init__(self, session: SessionState, arm: str | None = None, header: bool = True, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.only_arm = arm
        self.tail = False
        self.header = header  # False: a LevelTableHeader over the table's scroll draws it instead

    def _rows(self):
        rows = self.session.level_rows()
        if self.only_arm is not None:
            rows = [r for r in rows if r.arm == self.only_arm]
        return rows

    def _noisy(self, r) -> bool:
        """A plateau knee row whose 95% bounds do not settle it: marked * with a footnote."""
        return r.knee == "plateau" and self.session.arm(r.arm).plateau_resolved is False

    def get_content_height(self, container, viewport, width: int) -> int:
        rows = self._rows()
        levels = len({r.level for r in rows})
        foot = 1 if any(self._noisy(r) for r in rows) else 0
        return (2 if self.header else 0) + len(rows) + max(levels - 1, 0) + foot if rows else 1

    def columns(self, rows, width: int) -> tuple[int, list[tuple[str, int, bool]]]:
        """(arm column width, the columns shown) at this width."""
        names = [r.arm for r in rows]
        rates = any(r.offered_rate is not None for r in rows)
        columns = list(RATE_COLUMNS if rates else COLUMNS)
        # one arm's table (the detail view) names it in its title: its rows carry only the glyph
        name_w = 3 if self.only_arm is not None else max(len(n) for n in names) + 3
        tail_w = KNEE_MARK_W - 9 if any(r.knee for r in rows) else 0  # a knee mark runs past its column
        for drop in DROP_FIRST:
            if name_w + sum(w for _, w, _ in columns) + tail_w <= width:
                break
            columns = [c for c in columns if c[0] != drop]
        return min(name_w, max(width - sum(w for _, w, _ in columns) - tail_w, 8)), columns

    def render(self) -> Text:
        rows = self._rows()
        if not rows:
            return Text("no level finished yet", style=self.st("dim"))
        width = max(self.size.width, 40)
        arm_w, columns = self.columns(rows, width)
        rule_w = self.rule_width(width, arm_w, columns)
        lines = self.head(arm_w, columns, rule_w) if self.header else []
        body: list[list[Text]] = []  # one list of lines per level
        prev: object = object()  # no level yet: the first row opens one
        for r in rows:
            if r.level != prev:
                body.append([])
            prev = r.level
            body[-1].append(self._row(r, arm_w, columns))
        foot = ([Text("* plateau within the noise: its 95% bounds do not settle it", style=self.st("dim"))]
                if any(self._noisy(r) for r in rows) else [])
        total = sum(len(level) for level in body) + len(body) - 1  # the rows and the rules between levels
        room = self.size.height - len(lines) - len(foot)
        if self.tail and self.size.height and total > room:
            # the newest levels that fit whole under the header, and a line counting the others
            room -= 1
            shown: list[list[Text]] = []
            used = 0
            for level in reversed(body):
                cost = len(level) + (1 if shown else 0)
                if shown and used + cost > room:
                    break
                shown.insert(0, level)
                used += cost
            hidden = len(body) - len(shown)
            key = "escape, r: every level" if self.only_arm is not None else "r: every level"  # r is the main view's
            lines.append(Text(f"↑ {hidden} earlier level" + ("s" if hidden != 1 else "") + f" · {key}",
                              style=self.st("dim")))
            body = shown
        for i, level in enumerate(body):
            if i:
                lines.append(Text("┄" * rule_w, style=self.st("dim")))
            lines.extend(level)
        lines.extend(foot)
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)

    @staticmethod
    def rule_width(width: int, arm_w: int, columns) -> int:
        return min(width, arm_w + sum(w for _, w, _ in columns))

    def head(self, arm_w: int, columns, rule_w: int, underline: bool = False) -> list[Text]:
        """The column names and the rule under them; underlined instead, in one line (the
        docked header of r's scroll, where a row counts: 80x24 has 8 for the table)."""
        label = self.st("label") + Style(underline=True) if underline else self.st("label")
        head = Text("arm".ljust(arm_w), style=label, no_wrap=True)
        for name, w, right in columns:
            head.append((name.rjust(w) if right else " " + name.ljust(w - 1)), style=label)
        if underline:
            head.append(" " * max(rule_w - head.cell_len, 0), style=label)
            return [head]
        return [head, Text("─" * rule_w, style=self.st("dim"))]

    def _row(self, r, arm_w: int, columns) -> Text:
        arm = self.session.arm(r.arm)
        knee_row = bool(r.knee)
        vs = self.st("warn") if knee_row else self.st("value")
        cells = {
            "C": str(r.offered_concurrency), "rate": f"{r.offered_rate:g}/s" if r.offered_rate is not None else "—",
            "ach C": fmt.num(r.achieved_concurrency, 1), "tok/s": fmt.rate(r.output_tok_s),
            "tok/s/u": fmt.rate(r.per_user_tok_s), "TTFT50": fmt.secs(r.ttft_p50_s),
            "TTFT99": fmt.secs(r.ttft_p99_s), "TPOT": fmt.secs(r.tpot_p50_s),
            "acc": "—" if r.accept_length is None else f"{r.accept_length:.2f}", "ok/fail": f"{r.ok}/{r.failed}",
        }
        line = Text(no_wrap=True)
        label = arm_glyph(arm.index) if self.only_arm is not None else f"{arm_glyph(arm.index)} {r.arm}"
        if len(label) > arm_w - 1:
            label = label[:arm_w - 2] + "…"
        line.append(label.ljust(arm_w), style=self.arm_style(arm.index))
        for name, w, _ in columns:
            if name == "knee":
                continue
            style = self.st("bad") if name == "ok/fail" and r.failed else vs
            line.append(cells[name].rjust(w)[-w:], style=style)
        if r.knee:
            line.append(" ◆ " + r.knee + ("*" if self._noisy(r) else ""), style=self.st("warn"))
        elif not r.valid:
            line.append(" invalid", style=self.st("bad"))
        return line


class LevelTableHeader(StyledWidget):
    """The level table's column names, docked at the top of its scroll: in r, where the whole
    table scrolls, they stay in view over the rows (at 80x24 they scrolled away with the first
    levels). Nothing while no level has finished (the table says so itself)."""

    DEFAULT_CSS = "LevelTableHeader { dock: top; height: auto; }"

    def __init__(self, table: LevelTable, **kw) -> None:
        super().__init__(**kw)
        self.table = table

    def get_content_height(self, container, viewport, width: int) -> int:
        return 1 if self.table._rows() else 0

    def render(self) -> Text:
        rows = self.table._rows()
        if not rows:
            return Text("")
        width = max(self.size.width, 40)
        arm_w, columns = self.table.columns(rows, width)
        head, = self.table.head(arm_w, columns, self.table.rule_width(width, arm_w, columns), underline=True)
        head.truncate(width, overflow="ellipsis")
        return head


class LevelScroll(VerticalScroll):
    """The level table's scroll box: kept at its end (the newest level in view) as levels arrive
    and when r opens it, until the operator scrolls up; back at the end, it follows again.

    It follows when the layout gives it a new size (Resize) or the table a new height (its
    virtual size), the figures the scroll depends on. A scroll_end queued after r's refresh raced
    that relayout when r switched views, and now and then left the view at the table's top.
    (Textual's own anchor() bottom-aligns a table shorter than its box, leaving blank rows over
    it.)"""

    following = True

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.following = new_value >= self.max_scroll_y

    def follow(self) -> None:
        self.following = True
        self.scroll_end(animate=False)

    def on_resize(self) -> None:  # its box resized (r, the terminal)
        if self.following:
            self.scroll_end(animate=False, immediate=True)

    def watch_virtual_size(self) -> None:  # the table grew or shrank in the same box: no Resize
        if self.following:
            self.scroll_end(animate=False)  # after the refresh: the container's size is set last


class RampPane(Vertical):
    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session

    def compose(self) -> ComposeResult:
        yield RampProgress(self.session)
        with Horizontal(id="ramp-body"):
            with LevelScroll(id="level-scroll"):
                table = LevelTable(self.session, header=False)
                yield LevelTableHeader(table)
                yield table
            with Vertical(id="plots"):
                yield LevelPlot(self.session, "output_tok_s", "output tok/s vs C", _short_rate)
                yield LevelPlot(self.session, "ttft_p50_s", "TTFT p50 vs C", fmt.secs)

    def on_mount(self) -> None:
        self.border_title = "ramp"

    def set_tail(self, short: bool, follow: bool = True) -> None:
        """The table's newest levels that fit its box, with a line counting the earlier ones
        (follow: everywhere but r, where the whole table scrolls, kept at its end); a short
        pane (the app's choice) also leaves its plots to r when stacked."""
        table = self.query_one(LevelTable)
        tail = short or follow
        self.set_class(short, "-tail")
        self.set_class(follow and not short, "-follow")
        if table.tail != tail:
            table.tail = tail
            table.refresh(layout=True)

    def set_hint(self, hint: str | None) -> None:
        """The key to the rest, in the pane's title ('ramp · r: every level')."""
        title = "ramp" + (f" · {hint}" if hint else "")
        if self.border_title != title:
            self.border_title = title

    def redraw(self) -> None:
        # a new level's rows: the table's new height reaches LevelScroll (watch_virtual_size)
        for w in self.query(StyledWidget):
            w.refresh(layout=isinstance(w, (LevelTable, LevelTableHeader)))


def _short_rate(v: float) -> str:
    return f"{v / 1000:.1f}K" if v >= 10_000 else f"{v:.0f}"

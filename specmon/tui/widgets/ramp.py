"""The ramp: current level, progress and ETA; the per-level table; the two curves per arm."""

from __future__ import annotations

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
            filled, empty = bar(frac, 20)
            t.append("  ")
            t.append(filled, style=self.st("bar"))
            t.append(empty, style=self.st("bar-empty"))
            t.append(f" {fmt.duration(elapsed)}", style=self.st("value"))
            t.append(f"/{fmt.duration(planned)}" if planned else "", style=self.st("unit"))
            if pr is not None and pr.eta_s is not None and s.ramp_finished is None:
                t.append("  ETA ", style=self.st("unit"))
                t.append(fmt.duration(pr.eta_s), style=self.st("value"))
            if pr is not None and pr.done_requests:
                t.append("  done", style=self.st("unit"))
                for arm in s.arms.values():
                    if arm.name in pr.done_requests:
                        t.append(f" {arm_glyph(arm.index)}", style=self.arm_style(arm.index))
                        t.append(f"{pr.done_requests[arm.name]}", style=self.st("value"))
            if s.ramp_finished is not None:
                t.append(f"  ramp {s.ramp_finished}", style=self.st("warn" if s.ramp_finished != "done" else "good"))
            elif self.paused:
                t.append("  PAUSED", style=self.st("warn"))
        t.truncate(width, overflow="ellipsis")
        return t


# (header, width, right-aligned); the arm column takes what is left up to its widest name.
COLUMNS = (("C", 4, True), ("ach C", 6, True), ("tok/s", 7, True), ("tok/s/u", 8, True),
           ("TTFT50", 8, True), ("TTFT99", 8, True), ("TPOT", 7, True), ("acc", 5, True),
           ("ok/fail", 8, True), ("knee", 9, False))
TABLE_W = 4 + sum(w for _, w, _ in COLUMNS)
# A ramp of request rates: its first column is the rate ("4/s"), wider.
RATE_COLUMNS = (("rate", 7, True),) + COLUMNS[1:]


class LevelTable(StyledWidget):
    """Fixed-width per-level table (one row per arm per level, a rule between levels)."""

    DEFAULT_CSS = "LevelTable { height: auto; }"

    def __init__(self, session: SessionState, arm: str | None = None, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.only_arm = arm

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
        return 2 + len(rows) + max(levels - 1, 0) + foot if rows else 1

    def render(self) -> Text:
        rows = self._rows()
        if not rows:
            return Text("no level finished yet", style=self.st("dim"))
        width = max(self.size.width, 40)
        names = [r.arm for r in rows]
        rates = any(r.offered_rate is not None for r in rows)
        columns = RATE_COLUMNS if rates else COLUMNS
        table_w = 4 + sum(w for _, w, _ in columns)
        arm_w = min(max(len(n) for n in names) + 3, max(width - table_w, 8))
        head = Text("arm".ljust(arm_w), style=self.st("label"), no_wrap=True)
        for name, w, right in columns:
            head.append((name.rjust(w) if right else " " + name.ljust(w - 1)), style=self.st("label"))
        lines = [head, Text("─" * min(width, arm_w + table_w - 4), style=self.st("dim"))]
        prev = None
        for r in rows:
            if prev is not None and r.level != prev:
                lines.append(Text("┄" * min(width, arm_w + table_w - 4), style=self.st("dim")))
            prev = r.level
            arm = self.session.arm(r.arm)
            knee_row = bool(r.knee)
            vs = self.st("warn") if knee_row else self.st("value")
            cells = [
                f"{r.offered_rate:g}/s" if r.offered_rate is not None else str(r.offered_concurrency),
                fmt.num(r.achieved_concurrency, 1), fmt.rate(r.output_tok_s),
                fmt.rate(r.per_user_tok_s), fmt.secs(r.ttft_p50_s), fmt.secs(r.ttft_p99_s),
                fmt.secs(r.tpot_p50_s), "—" if r.accept_length is None else f"{r.accept_length:.2f}",
                f"{r.ok}/{r.failed}",
            ]
            line = Text(no_wrap=True)
            label = f"{arm_glyph(arm.index)} {r.arm}"
            if len(label) > arm_w - 1:
                label = label[:arm_w - 2] + "…"
            line.append(label.ljust(arm_w), style=self.arm_style(arm.index))
            for (name, w, _), cell in zip(columns, cells):
                style = self.st("bad") if name == "ok/fail" and r.failed else vs
                line.append(cell.rjust(w)[-w:], style=style)
            if r.knee:
                line.append(" ◆ " + r.knee + ("*" if self._noisy(r) else ""), style=self.st("warn"))
            elif not r.valid:
                line.append(" invalid", style=self.st("bad"))
            lines.append(line)
        if any(self._noisy(r) for r in rows):
            lines.append(Text("* plateau within the noise: its 95% bounds do not settle it", style=self.st("dim")))
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)


class RampPane(Vertical):
    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session

    def compose(self) -> ComposeResult:
        yield RampProgress(self.session)
        with Horizontal(id="ramp-body"):
            with VerticalScroll(id="level-scroll"):
                yield LevelTable(self.session)
            with Vertical(id="plots"):
                yield LevelPlot(self.session, "output_tok_s", "output tok/s vs C", _short_rate)
                yield LevelPlot(self.session, "ttft_p50_s", "TTFT p50 vs C", fmt.secs)

    def on_mount(self) -> None:
        self.border_title = "ramp"

    def redraw(self) -> None:
        for w in self.query(StyledWidget):
            w.refresh(layout=isinstance(w, LevelTable))


def _short_rate(v: float) -> str:
    return f"{v / 1000:.1f}K" if v >= 10_000 else f"{v:.0f}"

"""A banner once a knee is confirmed: per arm one headline knee (queueing, else the plateau) and
`k: every knee`; with k, every knee definition and the predicted knee as below.

One line per arm (more where its knees do not fit the width): the confirmed plateau (D1, "(within the noise)" when its 95% bounds do not
settle it) and queueing (D2) knees, the D3 knees of the arm's latest level (Kleinrock power, and
with SLOs the SLO and goodput knees; "C=8?" while that maximum is not confirmed), an SLO search's
answer and bracket (or where it stands), the knee predicted from the KV pool, then the latest
confirmed knee's words. A ramp of request rates says "r=4/s" where a concurrency ramp says "C=4".
"""

from __future__ import annotations

from rich.text import Text

from specmon.analysis.knee import slo_condition
from specmon.tui.chart import arm_glyph
from specmon.tui.state import ArmState, SessionState
from specmon.tui.widgets.arm_row import fit_words
from specmon.tui.widgets.base import StyledWidget


KNEE_W = len(" KNEE ")
DETAIL_MIN_W = 16  # less room than this left on the line: the confirmed knee's words are left out


class KneeBanner(StyledWidget):
    """Every item whole: a knee that does not fit its arm's line goes on the next line (indented);
    the predicted knee goes only where it fits, and the latest knee's words fill what is left of
    the last line, cut between words."""

    DEFAULT_CSS = "KneeBanner { height: auto; display: none; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        # False: one headline knee per arm (queueing, else the plateau: the one to act on);
        # True (k): every definition, the predicted knee and the latest knee's words
        self.details = False

    def toggle_details(self) -> None:
        self.details = not self.details
        self.update_view()
        self.refresh(layout=True)

    def _lines(self, width: int) -> list[Text]:
        lines: list[Text] = []
        with self.session.lock:
            for arm in self.session.arms.values():
                if arm.knee_news:
                    lines.extend(self._pack(arm, max(width, 40)))
        return lines

    def rows(self, width: int) -> int:
        """Lines the banner takes at this width (0 when it has nothing to say)."""
        return len(self._lines(width))

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self._lines(width))

    def render(self) -> Text:
        return Text("\n", no_wrap=True, overflow="ellipsis").join(self._lines(self.size.width or 80))

    def _item(self, name: str, c, note: str = "", confirmed: bool = True, rates: bool = False,
              fleet: bool = False) -> Text:
        t = Text()
        t.append(f"{name} ", style=self.st("value"))
        # a fleet's worker is ramped through its gateway: its knee sits at the fleet's offered C
        t.append(("fleet " if fleet else "") + ("r=" if rates else "C="), style=self.st("unit"))
        t.append("—" if c is None else f"{c:g}", style=self.st("value"))
        if rates:
            t.append("/s", style=self.st("unit"))
        if not confirmed:  # the maximum so far: it has not fallen at two levels after it yet
            t.append("?", style=self.st("warn"))
        if note:
            t.append(f" ({note})", style=self.st("dim"))
        return t

    def _items(self, arm: ArmState) -> list[Text]:
        """The arm's knees, one Text each, in the order the banner says them."""
        items: list[Text] = []
        # Every definition confirmed so far (plateau and queueing can disagree: the gap between
        # them is the operator's answer), the latest one's words at the end.
        by_definition = {x.definition: x for x in arm.knees}
        rates = any(r.offered_rate is not None for r in arm.levels)
        fleet = arm.fleet is not None
        for definition, x in by_definition.items():
            note = "within the noise" if definition == "plateau" and x.resolved is False else ""
            items.append(self._item(definition, x.concurrency, note, rates=rates, fleet=fleet))
        summary = arm.knees_summary
        if summary is not None:
            if summary.power.concurrency is not None:
                items.append(self._item("power", summary.power.concurrency, confirmed=summary.power.confirmed,
                                        rates=rates, fleet=fleet))
            if summary.slo is not None:
                words = slo_condition(summary.slo.slo_ttft_s, summary.slo.slo_tpot_s)
                t = Text("SLO ", style=self.st("value"))
                if summary.slo.c_slo is None:
                    t.append("met nowhere", style=self.st("warn"))
                else:
                    t.append("met to " + ("r=" if rates else "C="), style=self.st("unit"))
                    t.append(f"{summary.slo.c_slo:g}" + ("/s" if rates else ""), style=self.st("value"))
                t.append(f" ({words.replace('<=', '≤')})", style=self.st("dim"))
                items.append(t)
                if summary.slo.c_goodput is not None:
                    items.append(self._item("goodput", summary.slo.c_goodput,
                                            confirmed=summary.slo.goodput_confirmed, rates=rates))
            if summary.search is not None:
                items.append(self._search(summary.search, rates))
        return items

    def _headline(self, arm: ArmState) -> Text:
        """The one knee to act on: the analysis' headline (queueing, else the plateau), or before
        the arm's first summary the confirmed knee events' own (queueing first)."""
        rates = any(r.offered_rate is not None for r in arm.levels)
        fleet = arm.fleet is not None
        summary = arm.knees_summary
        h = summary.headline if summary is not None else None
        if h is not None:
            note = ("the ramp's last level: add a level to confirm" if not h.confirmed else
                    "within the noise" if h.definition == "plateau" and "within the noise" in h.words else "")
            return self._item(f"{h.definition} knee", h.concurrency, note, confirmed=h.confirmed,
                              rates=rates, fleet=fleet)
        by_definition = {x.definition: x for x in arm.knees}
        for definition in ("queueing", "plateau"):
            x = by_definition.get(definition)
            if x is not None:
                note = "within the noise" if definition == "plateau" and x.resolved is False else ""
                return self._item(f"{definition} knee", x.concurrency, note, rates=rates, fleet=fleet)
        if summary is not None and summary.ramp_end:  # the ramp ended: what it says about the knee
            return Text(summary.ramp_end, style=self.st("warn"))
        done = self.session.ramp_finished is not None  # (the banner holds the session's lock)
        return Text("no queueing or plateau knee" + ("" if done else " yet"), style=self.st("dim"))

    def _pack(self, arm: ArmState, width: int) -> list[Text]:
        head = Text(no_wrap=True)
        head.append(" KNEE ", style=self.st("warn"))
        head.append(f"{arm_glyph(arm.index)} {arm.name}", style=self.arm_style(arm.index))
        if not self.details:
            head.append("  ")
            head.append_text(self._headline(arm))
            hint = Text("  k: every knee", style=self.st("dim"))
            if head.cell_len + hint.cell_len <= width:
                head.append_text(hint)
            if head.cell_len > width:
                head.truncate(width - 1)
                head.append("…")
            return [head]
        lines = [head]
        first = True  # no knee said yet
        for item in self._items(arm):
            line = lines[-1]
            sep = "  " if first else " · "
            if line.cell_len + len(sep) + item.cell_len > width:
                line = Text(" " * KNEE_W, no_wrap=True)
                lines.append(line)
                sep = ""
            line.append(sep, style=self.st("unit"))
            line.append_text(item)
            first = False
        line = lines[-1]
        pk = arm.predicted_knee
        if pk is not None and pk.concurrency is not None:
            # a worker's own KV pool: said apart from the fleet's C the measured knees are at
            pred = Text.assemble(("  predicted C≈", self.st("unit")), (f"{pk.concurrency:.1f}", self.st("value")),
                                 (" (this worker alone)" if arm.fleet is not None else "", self.st("dim")))
            if line.cell_len + pred.cell_len <= width:
                line.append_text(pred)
        k = arm.confirmed_knee
        room = width - line.cell_len - 2
        if k is not None and k.detail and room >= DETAIL_MIN_W:
            detail = k.detail.replace("C=", "fleet C=") if arm.fleet is not None else k.detail
            line.append("  " + fit_words(detail, room), style=self.st("dim"))
        for line in lines:  # an item wider than the whole line (a very narrow terminal)
            if line.cell_len > width:
                line.truncate(width - 1)
                line.append("…")
        return lines

    def _search(self, s, rates: bool) -> Text:
        """'search C=12 [12, 13) 8 levels' (done) or 'search 8…16' while it bisects."""
        def v(x) -> str:
            return "?" if x is None else f"{x:g}" + ("/s" if rates else "")

        t = Text("search ", style=self.st("value"))
        if s.done:
            if s.answer is None:
                t.append("none", style=self.st("warn"))
            else:
                t.append("r=" if rates else "C=", style=self.st("unit"))
                t.append(v(s.answer), style=self.st("good"))
            bracket = f" [{v(s.lo)}, {v(s.hi)})" if s.lo is not None and s.hi is not None else ""
            t.append(f"{bracket} {s.levels_used} levels", style=self.st("dim"))
        else:
            t.append(f"{v(s.lo)}…{v(s.hi)}" if s.hi is not None else f"≥{v(s.lo)}", style=self.st("value"))
            t.append(f" ({s.levels_used} levels)", style=self.st("dim"))
        return t

    def update_visibility(self) -> None:
        with self.session.lock:
            show = self.session.shows("knee") and any(a.knee_news for a in self.session.arms.values())
        if self.display != show:
            self.display = show  # (a layout pass of its own)
        self.update_view()  # a layout only when its number of lines changed

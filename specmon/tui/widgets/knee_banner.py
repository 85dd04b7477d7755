"""A banner once a knee is confirmed: per arm, every knee definition, and the predicted knee.

One line per arm: the confirmed plateau (D1, "(within the noise)" when its 95% bounds do not
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
from specmon.tui.widgets.base import StyledWidget


class KneeBanner(StyledWidget):
    DEFAULT_CSS = "KneeBanner { height: auto; display: none; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session

    def render(self) -> Text:
        lines = []
        with self.session.lock:
            for arm in self.session.arms.values():
                if arm.knee_news:
                    lines.append(self._line(arm))
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)

    def _item(self, t: Text, first: bool, name: str, c, note: str = "", confirmed: bool = True,
              rates: bool = False) -> None:
        t.append("  " if first else " · ", style=self.st("unit"))
        t.append(f"{name} ", style=self.st("value"))
        t.append("r=" if rates else "C=", style=self.st("unit"))
        t.append("—" if c is None else f"{c:g}", style=self.st("value"))
        if rates:
            t.append("/s", style=self.st("unit"))
        if not confirmed:  # the maximum so far: it has not fallen at two levels after it yet
            t.append("?", style=self.st("warn"))
        if note:
            t.append(f" ({note})", style=self.st("dim"))

    def _line(self, arm: ArmState) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" KNEE ", style=self.st("warn"))
        t.append(f"{arm_glyph(arm.index)} {arm.name}", style=self.arm_style(arm.index))
        # Every definition confirmed so far (plateau and queueing can disagree: the gap between
        # them is the operator's answer), the latest one's words at the end.
        by_definition = {x.definition: x for x in arm.knees}
        rates = any(r.offered_rate is not None for r in arm.levels)
        n = 0
        for definition, x in by_definition.items():
            note = "within the noise" if definition == "plateau" and x.resolved is False else ""
            self._item(t, n == 0, definition, x.concurrency, note, rates=rates)
            n += 1
        summary = arm.knees_summary
        if summary is not None:
            if summary.power.concurrency is not None:
                self._item(t, n == 0, "power", summary.power.concurrency, confirmed=summary.power.confirmed,
                           rates=rates)
                n += 1
            if summary.slo is not None:
                words = slo_condition(summary.slo.slo_ttft_s, summary.slo.slo_tpot_s)
                t.append("  " if n == 0 else " · ", style=self.st("unit"))
                t.append("SLO ", style=self.st("value"))
                if summary.slo.c_slo is None:
                    t.append("met nowhere", style=self.st("warn"))
                else:
                    t.append("met to " + ("r=" if rates else "C="), style=self.st("unit"))
                    t.append(f"{summary.slo.c_slo:g}" + ("/s" if rates else ""), style=self.st("value"))
                t.append(f" ({words.replace('<=', '≤')})", style=self.st("dim"))
                n += 1
                if summary.slo.c_goodput is not None:
                    self._item(t, False, "goodput", summary.slo.c_goodput, confirmed=summary.slo.goodput_confirmed,
                               rates=rates)
            if summary.search is not None:
                self._search(t, summary.search, rates)
        pk = arm.predicted_knee
        if pk is not None and pk.concurrency is not None:
            t.append("  predicted C≈", style=self.st("unit"))
            t.append(f"{pk.concurrency:.1f}", style=self.st("value"))
        k = arm.confirmed_knee
        if k is not None and k.detail:
            t.append("  " + k.detail, style=self.st("dim"))
        return t

    def _search(self, t: Text, s, rates: bool) -> None:
        """' · search C=12 [12, 13) 8 levels' (done) or ' · search 8…16' while it bisects."""
        def v(x) -> str:
            return "?" if x is None else f"{x:g}" + ("/s" if rates else "")

        t.append(" · ", style=self.st("unit"))
        t.append("search ", style=self.st("value"))
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

    def update_visibility(self) -> None:
        with self.session.lock:
            self.display = self.session.shows("knee") and any(a.knee_news for a in self.session.arms.values())
        self.refresh(layout=True)

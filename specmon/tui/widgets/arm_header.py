"""The two header lines of an arm: where it is and whether it is up; what it runs."""

from __future__ import annotations

from rich.text import Text

from specmon.tui import fmt
from specmon.tui.widgets.base import StyledWidget
from specmon.tui.state import ArmState, SessionState

DOWN_STATES = {"down", "refused", "timeout", "unauthorized", "error", "failed"}


def arm_status(arm: ArmState) -> tuple[str, str]:
    """(words, style kind) for the arm's state: 'up · metrics', 'refused: connection refused'."""
    s = arm.last
    if s is None:
        if arm.phase:
            return (arm.phase, "bad" if arm.phase == "failed" else "warn")
        return ("waiting", "dim")
    if s.up and s.state == "up":
        source = "/v1/loads" if s.source == "loads" else s.source  # the fallback by its endpoint
        return ("up" + (f" · {source}" if source else ""), "good")
    words = s.state + (f": {s.reason}" if s.reason else "")
    return (words, "bad" if s.state in DOWN_STATES else "warn")


class ArmHeader:
    """Line 1: state (when not up), address, model, sim speed, phase. Line 2: what the server
    runs (speculation, request cap, KV pool, TP, predicted knee). Each line's items flow onto
    another line, between items, when the pane is too narrow for them (three arms side by side
    below 160 columns), so no figure is cut in half; only an item wider than the pane is cut.
    Not a widget: its arm's panel (ArmPanel) draws these lines, with its own component styles."""

    def __init__(self, host: StyledWidget, session: SessionState, arm: str) -> None:
        self.host = host
        self.st = host.st
        self.session = session
        self.arm_name = arm
        self._kept: tuple = ((), [])  # (what the lines were built from, the lines)

    def height(self, width: int) -> int:
        return len(self.lines(width))

    def lines(self, width: int) -> list[Text]:
        """The header's lines, built again only when what they show changed: they hold still
        for a whole session but were built every tick. Kept by everything they read (the
        server info, replaced, not changed, when it changes; the predicted knee likewise), the
        width and the styles; the Texts kept are only read by the panel, never changed."""
        with self.session.lock:
            arm = self.session.arm(self.arm_name)
            pk = arm.predicted_knee
            key = (width, arm.url, arm.info, arm_status(arm), arm.phase, arm.phase_detail,
                   pk.concurrency if pk is not None else None,
                   *(self.st(n) for n in ("bad", "warn", "unit", "value", "dim")))
            if key != self._kept[0]:
                self._kept = (key, self._build(width))
        return self._kept[1]

    def _build(self, width: int) -> list[Text]:
        width = max(width, 20)
        dot = " · "
        with self.session.lock:
            arm = self.session.arm(self.arm_name)
            info = arm.info
            words, kind = arm_status(arm)
            first: list[Text] = []
            if kind in ("bad", "warn"):
                first.append(Text(("! " if kind == "bad" else "") + words, style=self.st(kind)))
            if arm.last is not None and arm.last.up and arm.last.source == "loads":
                # no --enable-metrics on the server: fewer figures (no TTFT, no accept histories)
                first.append(Text("figures from /v1/loads (metrics off)", style=self.st("warn")))
            url = arm.url or "—"
            first.append(Text(url.split("://", 1)[-1], style=self.st("unit")))
            model = (info.served_model_name or info.model) if info else None
            first.append(Text(model or "model —", style=self.st("value" if model else "dim")))
            if info is not None and info.time_scale and info.time_scale != 1.0:
                first.append(Text(f"sim ×{info.time_scale:g}", style=self.st("dim")))
            if arm.phase and arm.phase != "ready":
                first.append(Text(f"phase {arm.phase}" + (f" ({arm.phase_detail})" if arm.phase_detail else ""),
                                  style=self.st("warn")))
            items: list[Text] = []
            if info is None:
                items.append(Text("server info —", style=self.st("dim")))
            else:
                spec = fmt.spec_label(info.speculative_algorithm, info.speculative_num_steps,
                                      info.speculative_eagle_topk, info.speculative_num_draft_tokens)
                items.append(Text(spec, style=self.st("value" if info.speculative_algorithm else "dim")))
                items.append(self._pair("cap ", fmt.num(info.max_running_requests)))
                items.append(self._pair("pool ", fmt.tokens(info.kv_capacity_tokens)))
                if info.tp_size and info.tp_size > 1:
                    items.append(Text(f"TP{info.tp_size}", style=self.st("value")))
            pk = arm.predicted_knee
            if pk is not None and pk.concurrency is not None:
                items.append(self._pair("knee≈", f"{pk.concurrency:.0f}"))
        return self._flow(first, width, dot) + self._flow(items, width, dot)

    def _pair(self, label: str, value: str) -> Text:
        t = Text(label, style=self.st("unit"))
        t.append(value, style=self.st("value"))
        return t

    def _flow(self, items: list[Text], width: int, sep: str) -> list[Text]:
        """Items joined by `sep`, a new line where the next item would not fit."""
        lines = [Text(no_wrap=True, overflow="ellipsis")]
        for item in items:
            line = lines[-1]
            if line.cell_len and line.cell_len + len(sep) + item.cell_len > width:
                line = Text(no_wrap=True, overflow="ellipsis")
                lines.append(line)
            elif line.cell_len:
                line.append(sep, style=self.st("dim"))
            line.append_text(item)
        for line in lines:
            line.truncate(width, overflow="ellipsis")  # one item wider than the pane
        return lines

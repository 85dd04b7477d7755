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
        return ("up" + (f" · {s.source}" if s.source else ""), "good")
    words = s.state + (f": {s.reason}" if s.reason else "")
    return (words, "bad" if s.state in DOWN_STATES else "warn")


class ArmHeader(StyledWidget):
    DEFAULT_CSS = "ArmHeader { height: auto; }"

    def __init__(self, session: SessionState, arm: str, **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.arm_name = arm

    def render(self) -> Text:
        width = max(self.size.width, 20)
        with self.session.lock:
            arm = self.session.arm(self.arm_name)
            info = arm.info
            words, kind = arm_status(arm)
            dot = " · "
            l1 = Text(no_wrap=True, overflow="ellipsis")
            if kind in ("bad", "warn"):
                l1.append(("▲ " if kind == "bad" else "") + words, style=self.st(kind))
                l1.append(dot, style=self.st("dim"))
            url = arm.url or "—"
            l1.append(url.split("://", 1)[-1], style=self.st("unit"))
            model = (info.served_model_name or info.model) if info else None
            l1.append(dot, style=self.st("dim"))
            l1.append(model or "model —", style=self.st("value" if model else "dim"))
            if arm.phase and arm.phase != "ready":
                l1.append(dot + f"phase {arm.phase}" + (f" ({arm.phase_detail})" if arm.phase_detail else ""),
                          style=self.st("warn"))
            l2 = Text(no_wrap=True, overflow="ellipsis")
            if info is None:
                l2.append("server info —", style=self.st("dim"))
            else:
                spec = fmt.spec_label(info.speculative_algorithm, info.speculative_num_steps,
                                      info.speculative_eagle_topk, info.speculative_num_draft_tokens)
                l2.append(spec, style=self.st("value" if info.speculative_algorithm else "dim"))
                l2.append(dot + "cap ", style=self.st("unit"))
                l2.append(fmt.num(info.max_running_requests), style=self.st("value"))
                l2.append(dot + "pool ", style=self.st("unit"))
                l2.append(fmt.tokens(info.kv_capacity_tokens), style=self.st("value"))
                l2.append(" tok", style=self.st("unit"))
                if info.tp_size and info.tp_size > 1:
                    l2.append(dot + f"TP{info.tp_size}", style=self.st("value"))
                if info.time_scale and info.time_scale != 1.0:
                    l2.append(dot + f"sim ×{info.time_scale:g}", style=self.st("dim"))
            pk = arm.predicted_knee
            if pk is not None and pk.concurrency is not None:
                l2.append(dot + "knee≈", style=self.st("unit"))
                l2.append(f"{pk.concurrency:.0f}", style=self.st("value"))
            l1.truncate(width, overflow="ellipsis")
            l2.truncate(width, overflow="ellipsis")
        return Text("\n", no_wrap=True, overflow="ellipsis").join([l1, l2])

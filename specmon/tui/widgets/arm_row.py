"""One arm on one line, for screens too small for the arm panels (80x24 with two or more arms).

The same six figures as the panel, in columns under one header row (ArmRowsHeader): GPU memory
(a simulated arm's simulated card: the header says 'sim GiB', or the cell 'sim' beside real ones),
KV pool occupancy, acceptance length, running (of the cap) and queued, generation tok/s, and TTFT
p50/p90 (Q when queue time is most of it). An arm that is not up says its state instead. Columns
are dropped whole, never cut, where the names would not fit whole; a layout's `panes:` drops its
columns too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rich.style import Style
from rich.text import Text

from specmon.analysis.knee import QUEUE_TTFT_SHARE, queue_share
from specmon.model import Sample, kv_usage_of
from specmon.tui import fmt
from specmon.tui.chart import QUEUE_MARK, arm_glyph
from specmon.tui.state import ArmState, SessionState
from specmon.tui.widgets.arm_header import arm_status
from specmon.tui.widgets.base import StyledWidget
from specmon.tui.widgets.kv import FULL, WARN


@dataclass(frozen=True)
class Column:
    key: str
    pane: str  # the pane (specmon/panes.py) it stands for: a layout's `panes:` hides both
    header: str
    width: int
    optional: bool = False  # may be dropped when the line is too narrow


COLUMNS = (
    Column("gpu", "gpu", "GPU GiB", 9),
    Column("kv", "kv", "KV", 6),
    Column("accept", "accept", "accept", 6),
    Column("running", "queue", "run/cap", 7),
    Column("queued", "queue", "queue", 5),
    Column("tok_s", "throughput", "tok/s", 6),
    Column("ttft_p50", "ttft", "TTFT p50", 8),
    Column("ttft_p90", "ttft", "p90", 7, optional=True),
    Column("flag", "ttft", "", 2),
)
MARK_W = 2  # '› ' before the focused arm


def layout(session: SessionState, width: int) -> tuple[int, list[Column]]:
    """(name column width, columns) for every row at this width; the header uses the same."""
    names = session.arm_names()
    longest = max((len(n) for n in names), default=4) + 2  # glyph and space
    cols = [c for c in COLUMNS if session.shows(c.pane)]

    def fixed(cs: list[Column]) -> int:
        return MARK_W + sum(c.width + 1 for c in cs)

    if width - fixed(cols) < longest:  # the names whole first
        cols = [c for c in cols if not c.optional]
    return max(min(longest, width - fixed(cols)), 4), cols


def simulated_gpus(session: SessionState) -> Optional[bool]:
    """True when every arm with a GPU figure has a simulated one (the header then says 'sim GiB'),
    False when none does, None when some do (those cells say 'sim' themselves)."""
    kinds = {a.last.gpu_source == "simulated" for a in session.arms.values()
             if a.watched and not a.left and a.last is not None and a.last.gpu_mem_used_bytes is not None}
    return None if len(kinds) > 1 else (kinds == {True})


def _gib_pair(used: Optional[float], total: Optional[float]) -> str:
    if used is None:
        return fmt.DASH
    digits = 0 if used >= 100 * fmt.GIB else 1
    return fmt.gib(used, digits) + ("" if not total else "/" + fmt.gib(total, 0 if total >= 100 * fmt.GIB else 1))


class ArmRowsHeader(StyledWidget):
    DEFAULT_CSS = "ArmRowsHeader { height: 1; display: none; }"

    def __init__(self, session: SessionState, **kw) -> None:
        super().__init__(**kw)
        self.session = session

    def render(self) -> Text:
        width = self.size.width or 80
        with self.session.lock:
            name_w, cols = layout(self.session, width)
            simulated = simulated_gpus(self.session)
        t = Text(" " * MARK_W + "arm".ljust(name_w), style=self.st("label"), no_wrap=True)
        for c in cols:
            header = "sim GiB" if c.key == "gpu" and simulated else c.header
            t.append(" " + (header.rjust(c.width) if c.key != "flag" else " " * c.width), style=self.st("label"))
        return t


class ArmRow:
    """The arm's line; its panel (ArmPanel) draws it instead of the panes in compact mode, with
    its own component styles (not a widget of its own)."""

    def __init__(self, host: StyledWidget, session: SessionState, arm: str) -> None:
        self.host = host
        self.st = host.st
        self.arm_style = host.arm_style
        self.session = session
        self.arm_name = arm

    def line(self, width: int, focused: bool) -> Text:
        width = width or 80
        with self.session.lock:
            arm = self.session.arm(self.arm_name)
            name_w, cols = layout(self.session, width)
            t = Text(no_wrap=True)
            t.append("› " if focused else "  ", style=self.st("value"))
            label = f"{arm_glyph(arm.index)} {arm.name}"
            if len(label) > name_w:  # longer than the line leaves (a fleet worker's address)
                label = label[:name_w - 1] + "…"
            t.append(label.ljust(name_w), style=self.arm_style(arm.index))
            s = arm.last
            words, kind = arm_status(arm)
            if s is None or not s.up:
                room = max(width - t.cell_len - 1, 0)
                t.append(" " + fit_words(("! " if kind == "bad" else "") + words, room),
                         style=self.st(kind if kind != "good" else "dim"))
                return t
            for c in cols:
                text, style = self._cell(c.key, arm, s)
                t.append(" ")
                t.append(text.rjust(c.width) if c.key != "flag" else text.ljust(c.width), style=style)
        return t

    def _cell(self, key: str, arm: ArmState, s: Sample) -> tuple[str, Style]:
        value = self.st("value")
        if key == "gpu":
            text = _gib_pair(s.gpu_mem_used_bytes, s.gpu_mem_total_bytes)
            if s.gpu_source == "simulated" and simulated_gpus(self.session) is None:
                # beside real cards: this one says it is simulated (the header cannot)
                text = fmt.gib(s.gpu_mem_used_bytes, 0) + " sim"
            frac = (s.gpu_mem_used_bytes / s.gpu_mem_total_bytes
                    if s.gpu_mem_used_bytes is not None and s.gpu_mem_total_bytes else None)
            return text, self.st("dim") if text == fmt.DASH else (self.st("bad") if frac and frac >= 0.97 else value)
        if key == "kv":
            usage = kv_usage_of(s.kv_usage, s.kv_used_tokens, s.kv_capacity_tokens)
            style = self.st("bad") if usage is not None and usage >= FULL else (
                self.st("warn") if usage is not None and usage >= WARN else value)
            return fmt.pct(usage), self.st("dim") if usage is None else style
        if key == "accept":
            if arm.speculation is False:
                return "none", self.st("dim")  # the server runs no speculation: not a 0
            return ("—" if s.accept_length is None else f"{s.accept_length:.2f}"), value
        if key == "running":
            cap = arm.info.max_running_requests if arm.info else None
            return fmt.num(s.running_reqs) + (f"/{cap}" if cap else ""), value
        if key == "queued":
            return fmt.num(s.queued_reqs), self.st("warn") if s.queued_reqs else value
        if key == "tok_s":
            return fmt.rate(s.gen_tok_s), value
        if key == "ttft_p50":
            return fmt.secs(s.ttft_p50_s), value
        if key == "ttft_p90":
            return fmt.secs(s.ttft_p90_s), value
        share = queue_share(s)
        return (QUEUE_MARK if share is not None and share > QUEUE_TTFT_SHARE else ""), self.st("warn")


def fit_words(words: str, room: int) -> str:
    """`words` within `room` cells, cut between words (with …) when they do not fit."""
    if len(words) <= room:
        return words
    cut = words[:max(room - 1, 0)]
    if " " in cut:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" :·,") + "…"

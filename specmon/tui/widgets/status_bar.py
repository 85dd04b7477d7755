"""Top line: what this session is, live or replay, how long, where it records, and pauses."""

from __future__ import annotations

from typing import Optional

from rich.text import Text

from specmon.tui import fmt
from specmon.tui.state import SessionState
from specmon.tui.widgets.base import StyledWidget


class StatusBar(StyledWidget):
    DEFAULT_CSS = "StatusBar { height: 1; }"

    def __init__(self, session: SessionState, title: str, mode: str, out_dir: Optional[str], **kw) -> None:
        super().__init__(**kw)
        self.session = session
        self.title_text = title
        self.mode = mode
        self.out_dir = out_dir
        self.display_paused = False
        self.ramp_paused = False
        self.stopped: Optional[str] = None

    def render(self) -> Text:
        s = self.session
        dot = ("  ", self.st("dim"))
        with s.lock:
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(" specmon ", style=self.st("label"))
            t.append(self.title_text, style=self.st("value"))
            t.append(*dot)
            t.append(self.mode, style=self.st("good" if self.stopped is None else "dim"))
            t.append(*dot)
            t.append(fmt.duration(s.elapsed_s), style=self.st("value"))
            t.append(*dot)
            n = len(s.arm_names())  # the arms shown: not a gateway only the ramp names, nor workers that left
            t.append(f"{n} arm" + ("s" if n != 1 else ""), style=self.st("unit"))
            if s.markers:
                t.append(*dot)
                t.append(f"{len(s.markers)} mark" + ("s" if len(s.markers) != 1 else ""), style=self.st("unit"))
            if self.stopped is not None:
                t.append(*dot)
                t.append(f"ended: {self.stopped}", style=self.st("warn"))
            if self.ramp_paused:
                t.append(*dot)
                t.append("RAMP PAUSED", style=self.st("warn"))
            if self.display_paused:
                t.append(*dot)
                t.append("DISPLAY PAUSED (still recording)", style=self.st("warn"))
            if self.out_dir:  # last: the path is the first thing to give up room
                t.append(*dot)
                t.append(self.out_dir, style=self.st("dim"))
        t.truncate(self.size.width or 80, overflow="ellipsis")
        return t

"""Top line: what this session is, live or replay, how long, where it records, and pauses.

When the line is narrower than its items, whole items give way, the least telling first (the
folder, then the title's trailing words, ...); a long item (the title, why the session ended)
loses whole words from its end, with an ellipsis. A word is never cut in half."""

from __future__ import annotations

from typing import Optional

from rich.text import Text

from specmon.tui import fmt
from specmon.tui.state import SessionState
from specmon.tui.widgets.base import StyledWidget

SEP = "  "


def word_forms(text: str, least: int = 1) -> list[str]:
    """`text` with its trailing words dropped, each form with an ellipsis, shortest first (at
    least `least` words), then `text` whole."""
    words = text.split(" ")
    return [" ".join(words[:n]) + "…" for n in range(max(least, 1), len(words))] + [text]


def fit_items(items: list[list[tuple[int, Text]]], width: int) -> list[Optional[Text]]:
    """Per item (its forms, shortest first, each with a rank: 0 the most telling) the form it
    shows, or None where it gives way; items are joined by SEP. Forms are taken in rank order
    (within a rank, in the order shown, shorter first), each in place of its item's shorter one
    where the line still fits: an item with a low rank for its short form and a high one for
    its long form is said briefly before less telling items are said at all."""
    chosen: list[Optional[Text]] = [None] * len(items)

    def width_of(forms: list[Optional[Text]]) -> int:
        cells = [f.cell_len for f in forms if f is not None]
        return sum(cells) + len(SEP) * max(len(cells) - 1, 0)

    steps = sorted((rank, i, k) for i, forms in enumerate(items) for k, (rank, _) in enumerate(forms))
    level = [-1] * len(items)
    for _, i, k in steps:
        if k <= level[i]:
            continue
        was = chosen[i]
        chosen[i] = items[i][k][1]
        if width_of(chosen) <= width:
            level[i] = k
        else:
            chosen[i] = was
    return chosen


class StatusBar(StyledWidget):
    DEFAULT_CSS = "StatusBar { height: 1; }"

    def __init__(self, session: SessionState, title: str, mode: str, out_dir: Optional[str], **kw) -> None:
        super().__init__(**kw)
        self.session = session
        # the bar opens with ' specmon ': a title that starts with the name too would say it twice
        self.title_text = title[len('specmon '):] if title.startswith('specmon ') else title
        self.mode = mode
        self.out_dir = out_dir
        self.display_paused = False
        self.ramp_paused = False
        self.stopped: Optional[str] = None

    def render(self) -> Text:
        s = self.session

        def forms(text: str, style: str, rank: int, least: Optional[int] = None) -> list[tuple[int, Text]]:
            texts = word_forms(text, least) if least else [text]
            return [(rank, Text(f, style=self.st(style))) for f in texts]

        with s.lock:
            # the items in the order shown, each its forms (shortest first) with their ranks:
            # the higher the rank, the sooner the form gives way
            items = [
                forms(self.title_text, "value", 7, least=1),
                forms(self.mode, "good" if self.stopped is None else "dim", 1),
                forms(fmt.duration(s.elapsed_s), "value", 3),
            ]
            n = len(s.arm_names())  # the arms shown: not a gateway only the ramp names, nor workers that left
            items.append(forms(f"{n} arm" + ("s" if n != 1 else ""), "unit", 5))
            if s.markers:
                items.append(forms(f"{len(s.markers)} mark" + ("s" if len(s.markers) != 1 else ""), "unit", 6))
            if self.stopped is not None:
                items.append(forms(f"ended: {self.stopped}", "warn", 4, least=2))
            if self.ramp_paused:
                items.append(forms("RAMP PAUSED", "warn", 2))
            if self.display_paused:
                items.append([(2, Text("DISPLAY PAUSED", style=self.st("warn"))),
                              (6, Text("DISPLAY PAUSED (still recording)", style=self.st("warn")))])
            if self.out_dir:  # the first thing to give up room
                items.append(forms(self.out_dir, "dim", 8))
        # ' specmon ' carries its own spaces: the title follows it without a separator
        width = self.size.width or 80
        label = Text(" specmon ", style=self.st("label"))
        shown = fit_items(items, width - label.cell_len)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append_text(label)
        first = True
        for form in shown:
            if form is None:
                continue
            if not first:
                t.append(SEP, style=self.st("dim"))
            first = False
            t.append_text(form)
        return t

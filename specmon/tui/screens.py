"""Modal screens: key help (`?`), a marker label prompt (`m`), a log search prompt (`/`),
and the detail view of one arm (enter / d)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

from specmon.tui.chart import arm_glyph
from specmon.tui.state import SessionState
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.log_pane import LogPane
from specmon.tui.widgets.ramp import LevelTable

KEYS = [
    ("q / ctrl+q", "quit (stops the session, closes the recording)"),
    ("ctrl+c", "quit too; while a ramp runs, press it twice (within 5 s)"),
    ("p", "pause the display (collection and recording go on)"),
    ("m", "add a labelled marker row to samples.csv"),
    ("s", "save an SVG screenshot into the session folder"),
    ("tab / shift+tab", "focus the next / previous arm"),
    ("enter / d", "detail view of the focused arm (escape to go back)"),
    ("l", "show the launched servers' logs instead of the ramp (and back)"),
    ("r", "the ramp (every level, the plots) in place of the arms (and back)"),
    ("/", "search the focused arm's log (empty search clears)"),
    ("space", "pause / resume the ramp (replay: pause playback)"),
    ("n", "skip to the next ramp level"),
    ("o / O", "the fleet table (more than four arms): sort by the next column / reverse the order"),
    ("k", "every knee in the banner (plateau, queueing, power, SLO, predicted) / one headline knee per arm"),
    ("?", "this help"),
]

LEGEND = [
    ("KV", "pool occupancy: tokens used / allocated pool (max_total_num_tokens)"),
    ("Accept", "speculative acceptance length (tokens per verify step); 'no speculation' when off"),
    ("Reqs", "running / request cap, and queued; history: running left, queued right"),
    ("Gen", "generation tok/s (server), and per running request"),
    ("TTFT", "server TTFT p50/p90 over the scrape window; Q when queue time > 50 % of TTFT (the arms' own marks are ● ▲ ■ ◆ ✚ ★)"),
    ("one line", "a small terminal shows each arm on one line: GPU memory, KV, accept, run/cap, queue, "
                 "tok/s, TTFT"),
    ("◆ ┆", "confirmed knee on the ramp plots; ┊ the knee predicted from KV capacity"),
    ("KNEE", "one per arm: the queueing knee, else the plateau (the one to act on); with k: "
             "plateau (D1), queueing (D2), power = max tok/s ÷ TTFT p50, SLO met up to C, goodput = max "
             "tok/s × SLO attainment; C=8? not confirmed yet; within the noise: the plateau's 95% bounds "
             "do not settle it"),
    ("—", "not known (never shown as 0)"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold", no_wrap=True)
        keys.add_column()
        for k, what in KEYS:
            keys.add_row(k, what)
        keys.add_row("", "")
        for k, what in LEGEND:
            keys.add_row(k, what)
        with VerticalScroll(id="help-box"):  # taller than 24 rows: it scrolls (up/down, page keys)
            yield Static(Text("specmon keys", style="bold"), id="help-title")
            yield Static(keys)
            yield Static(Text("escape closes", style="dim"))

    def on_mount(self) -> None:
        # on the border, so that it shows however little of the box fits (80x24 shows half)
        self.query_one("#help-box").border_subtitle = "escape closes · ↑↓ PgUp PgDn scroll"

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


class PromptScreen(ModalScreen[str | None]):
    """One line of input; enter returns it (or the default when empty), escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, prompt: str, default: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.prompt = prompt
        self.default = default
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-box"):
            yield Static(self.prompt)
            yield Input(placeholder=self.placeholder or self.default, id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or self.default)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ArmDetailScreen(Screen[None]):
    """One arm with tall histories, its level rows and its log."""

    BINDINGS = [Binding("escape,enter,d", "app.pop_screen", "back")]

    def __init__(self, session: SessionState, arm: str) -> None:
        super().__init__()
        self.session = session
        self.arm_name = arm

    def compose(self) -> ComposeResult:
        with Horizontal(id="detail"):
            with VerticalScroll(id="detail-left"):
                yield ArmPanel(self.session, self.arm_name, chart_height=3, id="detail-arm")
            with Vertical(id="detail-right"):
                with VerticalScroll(id="detail-levels"):
                    table = LevelTable(self.session, arm=self.arm_name)
                    table.tail = True
                    yield table
                yield LogPane(self.session, self.arm_name, id="detail-log")
        yield Footer()

    def on_mount(self) -> None:
        arm = self.session.arm(self.arm_name)
        self.query_one("#detail-levels").border_title = f"{arm_glyph(arm.index)} {self.arm_name} levels"

    def redraw(self) -> None:
        self.query_one(ArmPanel).redraw()
        self.query_one(LevelTable).refresh(layout=True)
        self.query_one(LogPane).redraw()

"""The specmon Textual app: runs a live session (or a replay) in a worker and draws its events.

Data flow: `live.run(emit, stop)` calls `emit(event)`; emit feeds the plain-Python SessionState
(every event, so history is complete) and posts one message per event (thread-safe; ticks,
progress and log lines coalesce). Message handlers only redraw. Nothing here talks HTTP or NVML.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Optional

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal, VerticalScroll
from textual.widgets import ContentSwitcher, Footer
from textual.worker import Worker

from specmon.model import Event
from specmon.session.folder import public_url
from specmon.urls import without_credentials
from specmon.session.source import SessionSource, fewer_young_collections
from specmon.tui import messages as msg
from specmon.tui.screens import ArmDetailScreen, HelpScreen, PromptScreen
from specmon.tui.state import SessionState
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.arm_row import ArmRowsHeader
from specmon.tui.widgets.fleet import FLEET_TABLE_ABOVE, FleetHeader, FleetTable
from specmon.tui.widgets.gpu_strip import GpuStrip
from specmon.tui.widgets.knee_banner import KneeBanner
from specmon.tui.widgets.log_pane import LogPane
from specmon.tui.widgets.ramp import LevelScroll, RampPane
from specmon.tui.widgets.status_bar import StatusBar

CONFIRM_S = 5.0  # a second ctrl+c within this quits a running ramp
QUIT_WAIT_S = 15.0  # how long q waits for the session to close its recording
# Below the arm panels the ramp pane needs its border, its progress line and a few table rows; when
# the panels leave less than this, each arm becomes one line (compact mode) and `r` shows the rest.
RAMP_MIN_ROWS = 8
WIDE_FROM = 120  # columns: the arm panels side by side, and the ramp's plots beside its table
# A ramp pane shorter than this shows the newest rows of its table that fit (and, stacked below 120
# columns, leaves its plots to r): beside the table from 120 columns, below it (12 + 24 rows) under.
PLOTS_BESIDE_MIN_ROWS = 20
PLOTS_BELOW_MIN_ROWS = 39


class SpecmonApp(App[str]):
    CSS_PATH = Path(__file__).parent / "specmon.tcss"  # absolute: subclasses live elsewhere
    ENABLE_COMMAND_PALETTE = False
    # Arms side by side from 120 columns, stacked below that (classes of the screen).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_FROM, "-wide")]
    BINDINGS = [
        Binding("q", "quit", "quit"),
        # ctrl+c quits as in any terminal program (Textual's own binding only says to press
        # ctrl+q); while a ramp runs it asks first: a second ctrl+c within CONFIRM_S
        Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),
        Binding("p", "toggle_display", "pause"),
        # m, s and / are in `?` help, not the footer: at 80 columns it holds the rest and, over
        # the fleet table, the table's sort key, each whole
        Binding("m", "mark", "mark", show=False),
        Binding("s", "save_svg", "svg", show=False),
        Binding("tab", "focus_arm(1)", "next arm", show=False, priority=True),
        Binding("shift+tab", "focus_arm(-1)", "prev arm", show=False, priority=True),
        Binding("enter,d", "detail", "detail", key_display="d"),
        Binding("space", "toggle_ramp", "ramp"),
        Binding("n", "skip_level", "skip"),
        Binding("l", "toggle_logs", "logs"),
        Binding("r", "toggle_ramp_view", "levels"),
        Binding("slash", "search", "search", show=False),
        Binding("k", "toggle_knees", "knees", show=False),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(self, live: SessionSource, title: str = "specmon", *, autostart: bool = True) -> None:
        super().__init__()
        self.live = live
        # the command line's URLs as typed: a user:password in one is never shown
        self.title = without_credentials(title)
        self.state = SessionState([(a.name, public_url(a.url)) for a in live.arms])
        self.autostart = autostart
        self.display_paused = False
        self.ramp_paused = False
        self.logs_chosen_by_user = False
        self.compact = False  # the arms as one line each: their panels do not fit the terminal
        self.ramp_view = False  # r: the ramp pane (every level, the plots) in place of the arms
        self._layout_was: Optional[tuple] = None  # _layout_key when the layout was last chosen
        self.user_marks = 0  # marks placed with m in this app
        self._fleet_focused = False  # the fleet table has been given the focus once
        self.exit_reason: Optional[str] = None
        self._interrupt_at: Optional[float] = None  # monotonic time of a ctrl+c waiting for its second
        self._stop: Optional[asyncio.Event] = None
        self._live_worker: Optional[Worker] = None
        self.out_dir: Optional[Path] = Path(live.out_dir) if live.out_dir else None
        self.mode_label = live.mode_label

    # -- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(self.state, self.title, self.mode_label,
                        str(self.out_dir) if self.out_dir else None, id="status")
        yield GpuStrip(self.state, id="gpus")
        yield KneeBanner(self.state, id="knee")
        yield FleetHeader(self.state, id="fleet-header")
        with VerticalScroll(id="body", can_focus=False):
            yield FleetTable(self.state, id="fleet-table")
            with Container(id="arms"):
                yield ArmRowsHeader(self.state, id="arm-rows-head")
            with ContentSwitcher(initial="ramp", id="bottom"):
                yield RampPane(self.state, id="ramp")
                yield Horizontal(id="logs")
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        await self._sync_arms()
        self._handle_signals()
        if self.autostart:
            # After the first frame: Textual draws nothing until on_mount has returned and the
            # screen is laid out, and the session's first scrapes (three arms' /metrics parsed
            # on this loop) would come before it.
            self.call_after_refresh(self.start_live)

    def _handle_signals(self) -> None:
        """SIGTERM, SIGHUP (ssh dropped, tmux killed) and SIGINT from outside end the session as q
        does, with the reason recorded; launched servers stop with it."""
        loop = asyncio.get_running_loop()
        for sig, why in ((signal.SIGTERM, "terminated"), (signal.SIGHUP, "hangup"), (signal.SIGINT, "interrupted")):
            try:
                loop.add_signal_handler(sig, self._quit_because, why, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests), or no signals on this platform

    def _quit_because(self, why: str, sig: int) -> None:
        if self.live.stop_cause is None:
            self.live.stop_cause = why
        self.exit_reason = self.exit_reason or why
        self.run_worker(self._end_on_signal(sig), group="quit", exclusive=True)

    async def _end_on_signal(self, sig: int) -> None:
        if sig != signal.SIGHUP:
            await self.action_quit()
            return
        # A hangup: the terminal is probably gone, so there is nothing to draw the goodbye on.
        # The session still closes its recording (servers stop with it); then the process ends
        # as the signal would have ended it.
        if self._stop is not None:
            self._stop.set()
        worker = self._live_worker
        if worker is not None and worker.is_running:
            try:
                await asyncio.wait_for(worker.wait(), timeout=QUIT_WAIT_S)
            except Exception:
                worker.cancel()
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGHUP)

    def start_live(self) -> None:
        self._live_worker = self.run_worker(self._run_live(), name="live", group="live",
                                            exit_on_error=False)

    async def _run_live(self) -> None:
        self._stop = asyncio.Event()
        try:
            reason = await self.live.run(self.emit, self._stop)
        except asyncio.CancelledError:
            reason = "cancelled"
            raise
        except Exception as e:  # the session failed: keep the display, say why
            reason = f"error: {type(e).__name__}: {e}"
        finally:
            self.exit_reason = self.exit_reason or str(reason)
            self.post_message(msg.LiveStopped(str(reason)))

    # -- events in ---------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Called by the live session for every event, from any thread."""
        self.state.apply(event)
        self.post_message(msg.message_for(event))

    def _torn_down(self) -> bool:
        """The app is closing: its screens, and every widget on them, are being removed.

        Textual's teardown (App._shutdown; run_test's exit runs it while the app's message loop
        is still going) clears `is_running` first, then prunes the screens while the app still
        handles messages posted before or meanwhile (the live worker's last SessionEnded,
        LiveStopped). Those draw nothing: the widgets they would query are gone (NoMatches)."""
        return not self.is_running

    async def _sync_arms(self) -> None:
        """Mount a panel for every arm the state knows and a log pane for arms with log lines."""
        if self._torn_down():
            return
        arms_box = self.query_one("#arms")
        shown = self.state.arm_names()
        # In fleet mode the table stands for the arms: a hidden panel per worker (64: ~600
        # widgets, ~90 MiB) is not kept.
        panelled = shown if len(shown) <= FLEET_TABLE_ABOVE else []
        gone = [p for p in self._arm_panels() if p.arm_name not in panelled]  # workers that left a fleet
        for p in gone:
            await p.remove()
        have = {p.arm_name for p in self._arm_panels()}
        new = [ArmPanel(self.state, name, id=f"arm-{self.state.arm(name).index}")
               for name in panelled if name not in have]
        if new:
            await arms_box.mount_all(new)
        self.set_class(len(shown) >= 3, "-many-arms")
        self._update_compact()
        if self._torn_down():  # closed while panels were removed or mounted
            return
        logs_box = self.query_one("#logs")
        have_logs = {p.arm_name for p in logs_box.query(LogPane)}
        with self.state.lock:
            with_logs = [a.name for a in self.state.arms.values() if a.log_total and a.name not in have_logs]
        if with_logs:
            await logs_box.mount_all([LogPane(self.state, name) for name in with_logs])

    def redraw(self, *, arms: bool = False, ramp: bool = False, logs: bool = False) -> None:
        if self.display_paused or self._torn_down():
            return
        # update_view: repainted in the same compositor pass as the panels, and only when its
        # words changed (refresh() took a message round trip to a second pass every tick)
        self.query_one(StatusBar).update_view()
        self._show_chosen_panes()
        if arms:
            self._update_compact()
            self.query_one(GpuStrip).update_view()  # refreshed (laid out) only when it changed (its lines)
            self.query_one(FleetHeader).update_visibility()
            if self.fleet_mode:
                self.query_one(FleetTable).redraw()
            else:
                if self.compact:
                    self.query_one(ArmRowsHeader).refresh()  # its words follow the arms' (sim GiB)
                for p in self._arm_panels():
                    p.redraw()
        if ramp:
            self.query_one(RampPane).redraw()
            self.query_one(KneeBanner).update_visibility()
        if logs:
            for pane in self.query_one("#logs").query(LogPane):
                pane.redraw()
        if isinstance(self.screen, ArmDetailScreen):
            self.screen.redraw()

    def on_resize(self, event: events.Resize) -> None:
        # after the layout at the new size: the strip above the arms may take another line
        self.call_after_refresh(self._update_compact)

    def _rows_left(self, panels: list[ArmPanel], compact: bool) -> int:
        """Rows the ramp pane would have under the arms: panels (side by side from 120 columns,
        stacked below) or, compact, a line per arm under one header line."""
        width, height = self.size
        body_w = width - 1  # the body's scrollbar
        if self.ramp_view or not self.state.shows("arms"):
            need = 0
        elif self.fleet_mode:
            need = self.query_one(FleetTable).outer_size.height
        elif not panels:
            need = 0
        elif compact:
            need = len(panels) + 1
        elif width >= WIDE_FROM:
            need = max(p.full_height(body_w // len(panels)) for p in panels)
        else:
            need = sum(p.full_height(body_w) for p in panels)
        strip = self.query_one(GpuStrip)
        above = 2  # the status line and the footer
        above += max(strip.outer_size.height, 1) if strip.display else 0
        if self.state.shows("knee"):
            above += self.query_one(KneeBanner).rows(width)
        with self.state.lock:
            above += len(self.state.fleets)
        return height - above - need

    def _layout_key(self, panels: list[ArmPanel]) -> tuple:
        """What the heights _rows_left adds up depend on: while it stays the same, so does the
        layout (measuring the panels' lines every tick cost ~2 ms of CPU with three arms)."""
        strip = self.query_one(GpuStrip)
        with self.state.lock:
            arms = tuple((id(a.info), a.phase, a.phase_detail, len(a.knees), id(a.knees_summary),
                          id(a.predicted_knee), None if a.last is None else (a.last.state, a.last.reason,
                                                                             a.last.cache_hit_rate is not None))
                         for a in self.state.arms.values())
            fleets = len(self.state.fleets)
        table = self.query_one(FleetTable).outer_size.height if self.fleet_mode else 0
        return (tuple(self.size), self.ramp_view, len(panels), strip.display, strip.outer_size.height,
                fleets, table, tuple(self.state.panes or ()), arms)

    def _update_compact(self) -> None:
        """Compact mode when the panels leave the ramp pane fewer than RAMP_MIN_ROWS; the ramp
        table's newest rows only (its plots behind r when stacked) when its pane is short."""
        if self._torn_down():
            return
        panels = self._arm_panels()
        key = self._layout_key(panels)
        if key == self._layout_was:
            return
        self._layout_was = key
        compact = not self.fleet_mode and self._rows_left(panels, False) < RAMP_MIN_ROWS
        if compact != self.compact:
            self.compact = compact
            self.set_class(compact, "-compact")
            self.query_one(ArmRowsHeader).refresh()
        for p in panels:  # (also the panels mounted since)
            p.set_compact(compact)
        short = self._rows_left(panels, compact) < (PLOTS_BESIDE_MIN_ROWS if self.size.width >= WIDE_FROM
                                          else PLOTS_BELOW_MIN_ROWS)
        ramp = self.query_one(RampPane)
        ramp.set_tail(short and not self.ramp_view, follow=not self.ramp_view)
        self.query_one("#bottom").set_class(short, "-short")  # its least height: what is left
        more = "r: every level" + (", the plots" if self.size.width < WIDE_FROM else "")  # stacked: plots hidden
        ramp.set_hint("r: the arms" if self.ramp_view else (more if short else None))

    @property
    def fleet_mode(self) -> bool:
        """More arms than fit side by side: the fleet table instead of the arm panels."""
        return len(self.state.arm_names()) > FLEET_TABLE_ABOVE

    def _show_chosen_panes(self) -> None:
        """The layout's `panes:` (None: all) for the parts of the screen outside the arm panels."""
        state = self.state
        table = self.fleet_mode
        arms = state.shows("arms") and not self.ramp_view
        for selector, show in (("#gpus", state.shows("gpu")), ("#arms", arms and not table),
                               ("#fleet-table", arms and table),
                               ("#bottom", state.shows("levels") or state.shows("log"))):
            widget = self.query_one(selector)
            if widget.display != show:
                widget.display = show
            if selector == "#fleet-table":
                widget.can_focus = show  # hidden, it must not take the focus from the arm panels
                if show and not self._fleet_focused and not self.ramp_view:
                    # The fleet is found after the start gave the focus away (to the ramp's table,
                    # the first focusable then): the first time it shows, it takes it (its keys).
                    self._fleet_focused = True
                    if self.focused is None or self.focused.id == "level-scroll":
                        widget.focus()
        switcher = self.query_one(ContentSwitcher)
        if switcher.current == "ramp" and not state.shows("levels"):
            switcher.current = "logs"
        elif switcher.current == "logs" and not state.shows("log"):
            switcher.current = "ramp"

    async def on_tick(self, m: msg.Tick) -> None:
        await self._sync_arms()
        self.redraw(arms=True)

    async def on_arm_info_changed(self, m: msg.ArmInfoChanged) -> None:
        await self._sync_arms()
        self.redraw(arms=True)

    async def on_phase_changed(self, m: msg.PhaseChanged) -> None:
        await self._sync_arms()
        self.redraw(arms=True)

    async def on_log_lines(self, m: msg.LogLines) -> None:
        await self._sync_arms()
        if self._torn_down():
            return
        if not self.logs_chosen_by_user and not self.state.ramp_started:
            self.query_one(ContentSwitcher).current = "logs"
        self.redraw(logs=True)

    def on_level_started(self, m: msg.LevelStarted) -> None:
        if self._torn_down():
            return
        if not self.logs_chosen_by_user:
            self.query_one(ContentSwitcher).current = "ramp"
        self.redraw(ramp=True)

    def on_level_progress(self, m: msg.LevelProgress) -> None:
        self.redraw(ramp=True)

    def on_level_finished(self, m: msg.LevelFinished) -> None:
        self.redraw(ramp=True)

    async def on_knee_called(self, m: msg.KneeCalled) -> None:
        await self._sync_arms()
        self.redraw(arms=True, ramp=True)
        ev = m.event
        if ev.definition != "predicted" and not self.display_paused and not self._torn_down():
            where = "—" if ev.concurrency is None else f"{ev.concurrency:g}"
            noise = ", within the noise" if ev.definition == "plateau" and ev.resolved is False else ""
            self.notify(f"{ev.arm}: knee at C={where} ({ev.definition}{noise})", title="knee", timeout=8)

    def on_ramp_finished(self, m: msg.RampFinished) -> None:
        self.redraw(ramp=True)

    async def on_fleet_membership(self, m: msg.FleetMembership) -> None:
        await self._sync_arms()
        self.redraw(arms=True)
        if not self.display_paused and not self._torn_down():
            self.notify(m.event.note, title="fleet", timeout=6)

    def on_marker_added(self, m: msg.MarkerAdded) -> None:
        self.redraw()

    def on_session_ended(self, m: msg.SessionEnded) -> None:
        self.redraw(arms=True, ramp=True)

    def on_live_stopped(self, m: msg.LiveStopped) -> None:
        if self._torn_down():
            return
        self.query_one(StatusBar).stopped = m.reason
        self.redraw(arms=True, ramp=True, logs=True)
        self.query_one(StatusBar).refresh()

    # -- actions -------------------------------------------------------------------------------

    async def action_quit(self) -> None:
        if self._stop is not None:
            self._stop.set()
        worker = self._live_worker
        if worker is not None and worker.is_running:
            if not self._torn_down():  # a signal's quit may come while the app is closing
                self.query_one(StatusBar).stopped = "stopping…"
                self.query_one(StatusBar).refresh()
            try:
                await asyncio.wait_for(worker.wait(), timeout=QUIT_WAIT_S)
            except Exception:  # timed out or the session failed: it is over either way
                worker.cancel()
        self.exit(self.exit_reason or "quit")

    def ramp_running(self) -> bool:
        """A ramp has started, has not ended, and the session still runs."""
        worker = self._live_worker
        with self.state.lock:
            started, finished = self.state.ramp_started, self.state.ramp_finished
        return bool(started) and finished is None and worker is not None and worker.is_running

    async def action_interrupt(self) -> None:
        now = time.monotonic()
        if self.ramp_running() and (self._interrupt_at is None or now - self._interrupt_at > CONFIRM_S):
            self._interrupt_at = now
            self.notify(f"a ramp is running: ctrl+c again within {CONFIRM_S:g} s quits (q too)",
                        title="quit?", severity="warning", timeout=CONFIRM_S)
            return
        self._interrupt_at = None
        # ended by Ctrl-C: exit 130 as headless Ctrl-C (SIGINT) does (wiring.SIGNAL_EXIT); q is 0
        if self.live.stop_cause is None:
            self.live.stop_cause = "interrupted"
        self.exit_reason = self.exit_reason or "interrupted"
        await self.action_quit()

    def action_toggle_knees(self) -> None:
        """k: every knee definition in the banner, or the one headline knee per arm."""
        self.query_one(KneeBanner).toggle_details()
        self._layout_was = None  # the banner's height counts in the layout
        self._update_compact()

    def notify(self, message: str, *, title: str = "", severity="information", timeout: Optional[float] = None,
               markup: bool = True) -> None:
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        wait = self.NOTIFICATION_TIMEOUT if timeout is None else timeout
        self.set_timer(wait + 0.3, self._repaint_after_toasts)

    def _repaint_after_toasts(self, tries: int = 0) -> None:
        """The whole screen repainted once the toasts are gone. Textual repaints too little of
        the screen when a toast goes from our rack (docked top, one line down): in a terminal the
        toast's last line stayed over whatever was under it (the ramp pane's top border in the
        fleet demo) until a view switch repainted that region, while a screenshot, drawn afresh,
        was clean. tests/e2e/test_tmux_demo.py compares the two."""
        if self._torn_down():
            return
        self.screen.refresh()
        if self.screen.query("Toast") and tries < 20:  # one still showing: again once it has gone
            self.set_timer(0.5, lambda: self._repaint_after_toasts(tries + 1))

    def action_toggle_display(self) -> None:
        self.display_paused = not self.display_paused
        bar = self.query_one(StatusBar)
        bar.display_paused = self.display_paused
        bar.refresh()
        if not self.display_paused:
            self.redraw(arms=True, ramp=True, logs=True)

    def action_mark(self) -> None:
        # Numbered by the operator's own marks: the session's notes (the ramp marks a simulator
        # that falls behind its --speed, typically on a busy CPU) and a replay's recorded marks
        # are markers too, but not this operator's mark 1, 2, ...
        default = f"mark {self.user_marks + 1}"

        def done(label: Optional[str]) -> None:
            if label is None:
                return
            self.user_marks += 1
            self.live.mark(label)
            self.notify(f"marker: {label}", timeout=3)

        self.push_screen(PromptScreen("Marker label (enter for the default):", default=default), done)

    def action_save_svg(self) -> None:
        folder = self.out_dir if self.out_dir and self.out_dir.is_dir() else Path.cwd()
        name = time.strftime("screenshot-%Y%m%d-%H%M%S.svg")
        path = self.save_screenshot(filename=name, path=str(folder))
        self.notify(f"saved {path}", timeout=4)

    def _arm_panels(self) -> list[ArmPanel]:
        # the box's own children: a query would match every pane inside the panels too
        return [c for c in self.query_one("#arms").children if isinstance(c, ArmPanel)]

    def action_focus_arm(self, step: int) -> None:
        if self.screen is not self.screen_stack[0]:
            # On other screens tab keeps its usual meaning (move focus between inputs).
            if step > 0:
                self.screen.focus_next()
            else:
                self.screen.focus_previous()
            return
        panels = self._arm_panels()
        if not panels or self.ramp_view:  # the arms are hidden behind the ramp
            return
        focused = self.focused
        i = panels.index(focused) if focused in panels else (-1 if step > 0 else 0)
        target = panels[(i + step) % len(panels)]
        target.focus()
        target.scroll_visible()

    def focused_arm(self) -> Optional[str]:
        if isinstance(self.focused, ArmPanel):
            return self.focused.arm_name
        if self.fleet_mode:
            return self.query_one(FleetTable).selected_arm()
        names = self.state.arm_names()
        return names[0] if names else None

    def action_detail(self) -> None:
        if isinstance(self.screen, ArmDetailScreen):
            self.pop_screen()
            return
        arm = self.focused_arm()
        if arm is not None:
            self.push_screen(ArmDetailScreen(self.state, arm))

    def action_toggle_ramp(self) -> None:
        has_ramp = self.live.resume_ramp() if self.ramp_paused else self.live.pause_ramp()
        if not has_ramp:
            self.notify("this session has no ramp to pause", severity="warning", timeout=3)
            return
        self.ramp_paused = not self.ramp_paused
        self.query_one(StatusBar).ramp_paused = self.ramp_paused
        self.query_one("RampProgress").paused = self.ramp_paused
        self.redraw(ramp=True)

    def action_skip_level(self) -> None:
        if not self.live.skip_level():
            self.notify("this session has no ramp level to skip", severity="warning", timeout=3)
        else:
            self.notify("skipping to the next level", timeout=3)

    def action_toggle_logs(self) -> None:
        sw = self.query_one(ContentSwitcher)
        sw.current = "ramp" if sw.current == "logs" else "logs"
        self.logs_chosen_by_user = True
        if sw.current == "logs" and not self.query_one("#logs").children:
            self.notify("no log lines (logs come from servers specmon launched)", timeout=3)

    def action_toggle_ramp_view(self) -> None:
        """r: the ramp pane (every level's row, the plots) in place of the arms, and back."""
        if not self.state.shows("levels"):
            self.notify("this layout's panes leave out the levels", severity="warning", timeout=3)
            return
        self.ramp_view = not self.ramp_view
        self.set_class(self.ramp_view, "-ramp-view")
        if self.ramp_view:
            self._focus_before_ramp_view = self.focused  # hidden with the arms: given back on return
            self.query_one(ContentSwitcher).current = "ramp"
            self.logs_chosen_by_user = True
            scroll = self.query_one(LevelScroll)
            scroll.focus()  # the keys scroll the table
            scroll.follow()  # the newest level in view, kept there as levels arrive
        self._show_chosen_panes()
        before = getattr(self, "_focus_before_ramp_view", None)
        if not self.ramp_view and before is not None and before.is_attached:
            self.call_after_refresh(before.focus)
        self._update_compact()
        self.redraw(ramp=True)

    def action_search(self) -> None:
        if isinstance(self.screen, ArmDetailScreen):
            panes = [self.screen.query_one(LogPane)]
        else:
            arm = self.focused_arm()
            panes = [p for p in self.query_one("#logs").query(LogPane) if p.arm_name == arm]
            if not panes:
                self.notify("no log for this arm", timeout=3)
                return
            self.query_one(ContentSwitcher).current = "logs"
            self.logs_chosen_by_user = True

        def done(text: Optional[str]) -> None:
            if text is not None:
                for p in panes:
                    p.set_search(text)

        self.push_screen(PromptScreen("Search the log (empty clears):", default="",
                                      placeholder="text to find"), done)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())


def run_tui(live: SessionSource, title: str = "specmon") -> str:
    """Run the TUI over `live` (a LiveSession or a ReplaySource) until q; the exit reason."""
    app = SpecmonApp(live, title)
    with fewer_young_collections():  # a tick's strips: see there
        result = app.run()
    return result or app.exit_reason or "quit"

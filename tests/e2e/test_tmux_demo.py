"""The demo in a real terminal (tmux) draws what specmon itself says it draws.

A terminal shows only what Textual wrote to it: a region the app changed but never wrote (a fast
path that paints rows itself, a region left out of a repaint when a view switches) stays on the
terminal as stray characters, while specmon's own screenshot (`s`, rendered afresh from every
widget) is clean. So the demo and `demo --fleet` run in a detached tmux session at 80x24 and
160x48, the views are switched with `r`, and tmux's copy of the screen (capture-pane) is compared
with the text of the screenshot taken at the same moment (the display paused with `p` in between,
so the terminal holds still).

While the ramp runs the figures move between the capture and the screenshot, so only the frame
(every border and rule character, where it is) is compared then; once the ramp is done the
screen holds still and the whole text must be the same.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.gatewayproc import have_gateway
from helpers.simproc import REPO

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")

# Textual's SVG export: a cell is 0.61 of its 20 px font wide, each line a clip path named for its row
CELL_PX = 12.2
SVG_TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="[\d.]+" textLength="[\d.]+" '
                      r'clip-path="url\(#[^)]*-line-(\d+)\)">([^<]*)</text>')
FRAME = set("╭╮╰╯│─┤├┬┴┼┄")


def svg_text(svg: str, width: int, height: int) -> list[str]:
    """The screen's text as the screenshot draws it, row by row, trailing blanks dropped."""
    grid = [[" "] * width for _ in range(height)]
    for m in SVG_TEXT.finditer(svg):
        col, row = round(float(m[1]) / CELL_PX), int(m[2])
        for i, ch in enumerate(html.unescape(m[3]).replace("\xa0", " ")):
            if row < height and col + i < width:
                grid[row][col + i] = ch
    return ["".join(r).rstrip() for r in grid]


def frame(lines: list[str]) -> list[str]:
    return ["".join(c if c in FRAME else " " for c in line).rstrip() for line in lines]


class Tmux:
    def __init__(self, socket: Path, width: int, height: int, command: list[str]) -> None:
        self.base = [TMUX, "-S", str(socket)]
        self.width, self.height = width, height
        # `sleep` keeps the pane (and what specmon printed on the way out) if specmon ends early
        shell = " ".join(command) + "; sleep 300"
        subprocess.run([*self.base, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(width),
                        "-y", str(height), shell], check=True, cwd=str(REPO))

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", "-t", "t", *keys], check=True)

    def screen(self) -> list[str]:
        out = subprocess.run([*self.base, "capture-pane", "-p", "-t", "t"], check=True, capture_output=True,
                             text=True).stdout
        lines = [line.rstrip() for line in out.split("\n")][:self.height]
        return lines + [""] * (self.height - len(lines))

    def wait_for(self, what, timeout: float, why: str) -> list[str]:
        end = time.monotonic() + timeout
        while True:
            lines = self.screen()
            if what(lines):
                return lines
            if time.monotonic() > end:
                pytest.fail(f"{why} within {timeout:g} s; the screen:\n" + "\n".join(lines))
            time.sleep(0.3)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


def text_of(lines: list[str]) -> str:
    return "\n".join(lines)


def compare(term: Tmux, out: Path, whole: bool, when: str) -> None:
    """Pause the display, take tmux's screen and specmon's screenshot, compare, resume."""
    # the last screenshot's toast gone (it covers part of the screen, and is not in a screenshot)
    term.wait_for(lambda s: not any("saved " in line for line in s), 15, "the last toast gone")
    term.keys("p")
    term.wait_for(lambda s: "DISPLAY PAUSED" in s[0], 10, "the display paused")
    time.sleep(0.5)  # the frame that says so written out whole
    seen = term.screen()
    before = set(out.glob("screenshot-*.svg"))
    term.keys("s")
    end = time.monotonic() + 15
    while not (set(out.glob("screenshot-*.svg")) - before):
        assert time.monotonic() < end, "no screenshot saved after `s`"
        time.sleep(0.2)
    time.sleep(0.5)  # written whole
    shot = svg_text((set(out.glob("screenshot-*.svg")) - before).pop().read_text(), term.width, term.height)
    assert shot[0].startswith(" specmon"), text_of(shot)  # the SVG read as the screen it shows
    got, want = (seen, shot) if whole else (frame(seen), frame(shot))
    diff = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not diff, (f"{when}: the terminal differs from specmon's own screenshot on rows {diff}\n"
                      f"-- tmux --\n{text_of(seen)}\n-- screenshot --\n{text_of(shot)}")
    term.keys("p")
    term.wait_for(lambda s: "DISPLAY PAUSED" not in s[0], 10, "the display resumed")


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@pytest.mark.parametrize("fleet", [False, True], ids=["demo", "fleet"])
def test_tmux_screen_equals_specmons_screenshot_across_view_switches(tmp_path, size, fleet):
    if fleet and not have_gateway():
        pytest.skip("the smg gateway is not installed (demo --fleet runs it)")
    width, height = size
    out = tmp_path / "session"
    command = [sys.executable, "-m", "specmon", "demo", "--out", str(out), "--levels", "4,8",
               "--level-duration", "60", "--speed", "10", *(["--fleet"] if fleet else [])]
    term = Tmux(tmp_path / "tmux.sock", width, height, command)
    try:
        term.wait_for(lambda s: "live" in s[0] and re.search(r"level [12]/2", text_of(s)), 90, "the demo's ramp under way")
        compare(term, out, False, "arms, live")
        for n, view in enumerate(("levels", "arms", "levels", "arms"), 1):
            term.keys("r")
            time.sleep(1.5)
            compare(term, out, False, f"after {n} r ({view}), live")
        term.wait_for(lambda s: "ramp done" in text_of(s), 120, "the ramp done")
        time.sleep(2)  # the last figures in
        compare(term, out, True, "arms, ramp done")
        for n, view in enumerate(("levels", "arms", "levels"), 1):
            term.keys("r")
            time.sleep(1.5)
            compare(term, out, True, f"after {n} r ({view}), ramp done")
    finally:
        term.keys("q")
        time.sleep(1)
        term.close()

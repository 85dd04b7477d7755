"""The command line's first mistakes: no abbreviated flags, levels that climb, a plan with no
levels said plainly, and the demo's first line (how long, how to leave)."""

import subprocess
import sys

import pytest

from helpers.simproc import REPO

DEAD = "http://127.0.0.1:9"


def specmon(*args):
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=60,
                          cwd=str(REPO))


def one_error_line(p):
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in p.stderr, p.stderr
    return lines[0]


@pytest.mark.parametrize("args, needle", [
    (["ramp", DEAD, "--levels", "2", "--headles"], "--headles"),
    (["attach", DEAD, "--headl"], "--headl"),
    (["sim", "--spee", "2"], "--spee"),
])
def test_abbreviated_flags_are_refused(args, needle):
    assert needle in one_error_line(specmon(*args))


@pytest.mark.parametrize("levels, needle", [
    ("8,4", "ascending"), ("4,,8", "no empty entries"), ("8,", "no empty entries"), ("0,4", "positive"),
])
def test_levels_must_climb_without_gaps(levels, needle):
    assert needle in one_error_line(specmon("ramp", DEAD, "--levels", levels, "--headless"))


def test_a_repeated_level_is_kept():
    from specmon.bounds import check_levels

    assert check_levels([3, 3, 6]) == [3, 3, 6]


def test_no_levels_is_said_plainly():
    line = one_error_line(specmon("ramp", DEAD, "--headless"))
    assert "no levels given" in line and "rates" in line and "search" in line
    assert "required key is missing (or" not in line


def test_demo_says_its_length_and_how_to_leave():
    from specmon.commands.demo import demo_intro
    from specmon.servers.layout import load_layout

    layout, _ = load_layout("demo")
    text = demo_intro(layout, headless=False)
    n, d = len(layout.ramp.steps), layout.ramp.level_duration_s
    speed = layout.launched[0].launch.flags["speed"]
    wall = round(n * d / speed)
    assert f"{n} levels" in text and (f"{wall // 60} min {wall % 60:02d} s" in text if wall >= 60 else f"{wall} s" in text)
    assert "q quits" in text
    assert "Ctrl-C" in demo_intro(layout, headless=True)


def test_headless_numbers_levels_from_1_everywhere():
    """levels.csv keeps its 0-based `level` column; every line a person reads counts from 1."""
    import dataclasses
    import io

    from specmon.headless import HeadlessPrinter, level_table, tick_line
    from specmon.model import LevelFinished, LevelResult, LevelStarted, Sample, SamplesTick

    out = io.StringIO()
    printer = HeadlessPrinter(out)
    printer(LevelStarted(level=0, offered_concurrency=8, planned_s=60.0, levels_total=2))
    assert "level 1/2: concurrency 8" in out.getvalue()
    table = level_table(LevelFinished(level=0, results=[LevelResult(arm="a", level=0, offered_concurrency=8)]))
    assert table.splitlines()[0] == "level 1 finished"
    s = Sample(ts=0.0, arm="a", up=True)
    fields = {f.name for f in dataclasses.fields(Sample)}
    assert {"level", "offered_concurrency"} <= fields
    s.level, s.offered_concurrency = 0, 8
    assert " L1 C=8" in tick_line(SamplesTick(samples=[s]), 0.0)

"""Unit tests of the TUI's plain-Python parts: state, charts, number formats, and the replay's
event reconstruction (over a folder written by the real Recorder with known values)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from hypothesis import given, settings, strategies as st

from specmon.model import (
    ArmInfo, ArmInfoUpdated, KneeCalled, LevelFinished, LevelResult, LevelStarted, LogLine, Marker, Sample,
    SamplesTick, SessionEnded,
)
from specmon.session.replay import ReplaySource
from specmon.tui import fmt
from specmon.tui.chart import BLOCKS, Series, bar, spark_rows, xy_plot
from specmon.analysis.knee import queue_share
from specmon.model import KneesSummary, PowerKneeSummary, SloSummary
from specmon.tui.state import SessionState

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "snapshot_apps"))
import make_session  # noqa: E402


def test_state_keeps_unknown_as_none_and_history_per_arm():
    st = SessionState([("a", "http://x")])
    st.apply(SamplesTick(samples=[Sample(ts=1.0, arm="a", up=True, kv_usage=0.5, gen_tok_s=None),
                                  Sample(ts=1.0, arm="b", up=False, state="refused")], ts=1.0))
    st.apply(SamplesTick(samples=[Sample(ts=2.0, arm="a", up=True, kv_usage=0.7, gen_tok_s=100.0)], ts=2.0))
    assert st.arm_names() == ["a", "b"]  # b appeared mid-session
    assert st.series("a", "kv_usage") == [0.5, 0.7]
    assert st.series("a", "gen_tok_s") == [None, 100.0]
    assert st.arm("b").last.state == "refused"
    assert st.elapsed_s == 1.0


def test_state_speculation_and_knees_and_logs():
    st = SessionState()
    st.apply(ArmInfoUpdated(arm="n", info=ArmInfo(model="m", speculative_algorithm=None)))
    st.apply(ArmInfoUpdated(arm="e", info=ArmInfo(model="m", speculative_algorithm="EAGLE")))
    assert st.arm("n").speculation is False and st.arm("e").speculation is True
    st.apply(KneeCalled(arm="e", definition="predicted", concurrency=17.7, detail="kv"))
    assert st.arm("e").predicted_knee.concurrency == 17.7 and st.knee_events == []
    st.apply(LevelStarted(level=0, offered_concurrency=8, planned_s=60, levels_total=3))
    st.apply(LevelFinished(level=0, results=[LevelResult(arm="e", level=0, offered_concurrency=8, knee="queueing")]))
    st.apply(KneeCalled(arm="e", definition="queueing", concurrency=8, detail=""))
    assert st.arm("e").confirmed_knee.concurrency == 8 and st.levels_done == 1
    for i in range(3):
        st.apply(LogLine(arm="e", line=f"line {i}"))
    assert list(st.arm("e").logs) == ["line 0", "line 1", "line 2"] and st.arm("e").log_total == 3
    st.apply(Marker(label="x"))
    st.apply(SessionEnded(reason="done"))
    assert st.markers[0].label == "x" and st.ended == "done"


def test_queue_share_flags_queue_dominated_ttft():
    s = Sample(ts=0, arm="a", up=True, ttft_mean_s=4.0, queue_time_mean_s=3.2)
    assert queue_share(s) == 0.8
    assert queue_share(Sample(ts=0, arm="a", up=True, ttft_mean_s=4.0)) is None
    assert queue_share(Sample(ts=0, arm="a", up=True, ttft_mean_s=0.0, queue_time_mean_s=0.0)) is None


def test_spark_rows_gaps_scale_and_height():
    assert spark_rows([0, None, 8], 3, lo=0, hi=8) == [" " + " " + "█"]
    assert spark_rows([1, 2], 4, lo=0, hi=2) == ["  ▄█"]  # right-aligned, newest last
    two = spark_rows([4, 8], 2, height=2, lo=0, hi=8)
    assert two == [" █", "██"]
    assert spark_rows([0.001], 1, lo=0, hi=100) == ["▁"]  # a known non-zero value never vanishes
    # one row (its own path): NaN is a gap, values at or under lo are blank cells, over hi full,
    # the default scale from min(0, lowest) to the highest; the last `width` values only
    assert spark_rows([float("nan"), -1.0, 0.0, 9.0, 4.5], 5, lo=0, hi=8) == ["   █▄"]  # 4.5 eighths: round() to 4
    assert spark_rows([-2.0, 0.0, 2.0], 3) == [" ▄█"]
    assert spark_rows([1.0, 2.0, 3.0, 4.0], 2, lo=0, hi=4) == ["▆█"]


def _spark_reference(values, width, height=1, lo=None, hi=None):
    """spark_rows as its docstring says it, cell by cell and row by row."""
    vals = list(values)[-width:] if width > 0 else []
    known = [v for v in vals if v is not None and not math.isnan(v)]
    lo = (min(0.0, min(known)) if known else 0.0) if lo is None else lo
    height = max(height, 1)
    if hi is None:
        hi = max(known) if known else 1.0
        if known and hi > lo and min(known) == hi:  # never changes: one eighth, a low line
            hi = lo + (hi - lo) * height * 8
    span = hi - lo if hi > lo else 1.0
    rows = []
    for r in range(height):
        line = " " * (max(width, 0) - len(vals))
        for v in vals:
            if v is None or math.isnan(v):
                line += " "
                continue
            eighths = max(1, round(min(max((v - lo) / span, 0.0), 1.0) * height * 8)) if v > lo else 0
            line += BLOCKS[min(max(eighths - (height - 1 - r) * 8, 0), 8)]
        rows.append(line)
    return rows


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.none(), st.just(float("nan")), st.floats(-1e6, 1e6)), max_size=30),
       st.integers(-1, 40), st.integers(0, 4), st.one_of(st.none(), st.floats(-10, 10)),
       st.one_of(st.none(), st.floats(-10, 1e3)))
def test_spark_rows_is_its_cell_by_cell_definition(values, width, height, lo, hi):
    assert spark_rows(values, width, height, lo, hi) == _spark_reference(values, width, height, lo, hi)


def test_spark_rows_draws_infinities_without_raising():
    assert spark_rows([float("inf"), 1.0, float("-inf")], 3, lo=0, hi=8) == ["█▁ "]
    assert len(spark_rows([float("inf"), 2.0], 4)[0]) == 4


def test_bar_and_formats():
    assert bar(0.5, 4) == ("██", "  ")
    assert bar(None, 3) == ("", "···")
    assert fmt.secs(None) == "—" and fmt.secs(0.8123) == "812 ms" and fmt.secs(4.0) == "4.00 s"
    assert fmt.secs(75) == "1m15s"
    assert fmt.tokens(175000) == "175K" and fmt.tokens(24500) == "24.5K" and fmt.tokens(950) == "950"
    assert fmt.spec_label(None, None, None, None) == "no speculation"
    assert fmt.spec_label("EAGLE", 3, 1, 4) == "EAGLE 3/1/4"


def test_xy_plot_marks_points_and_knee():
    s = [Series("a", [(4, 100.0), (8, 190.0), (16, 200.0)], knee_x=8, predicted_x=16)]
    p = xy_plot(s, 40, 10)
    cells = [c for row in p.rows for c in row]
    assert sum(1 for ch, _, kind in cells if kind == "knee" and ch == "◆") == 1
    assert any(kind == "pred" for _, _, kind in cells)
    assert "4" in p.x_axis and "16" in p.x_axis
    assert p.y_labels[0] and p.y_labels[-1] == "0"


def test_replay_rebuilds_the_event_stream(tmp_path):
    folder = make_session.write(tmp_path / "s", n_arms=2, levels=(4, 8, 16, 32), level_s=3)
    src = ReplaySource(folder, speed=10)
    kinds = [type(e).__name__ for e in src.events]
    assert kinds[:3] == ["SessionStarted", "ArmInfoUpdated", "ArmInfoUpdated"]  # as a live session sends them
    assert kinds.count("SamplesTick") == 4 * 3 and kinds.count("LevelStarted") == 4
    assert kinds.count("LevelFinished") == 4 and kinds[-1] == "SessionEnded"
    ticks = [e for e in src.events if isinstance(e, SamplesTick)]
    assert all(len(t.samples) == 2 for t in ticks)
    knees = [e for e in src.events if isinstance(e, KneeCalled)]
    assert {(k.arm, k.definition) for k in knees if k.definition != "predicted"} == {
        ("fp8-mtp", "queueing"), ("nvfp4-mtp", "queueing")}
    assert [e.label for e in src.events if isinstance(e, Marker)] == ["after level 2"]
    finished = [e for e in src.events if isinstance(e, LevelFinished)]
    assert [len(f.results) for f in finished] == [2, 2, 2, 2]
    # unknown stays unknown: the no-speculation values never become 0
    s0 = ticks[0].samples[0]
    assert s0.accept_length is not None and s0.ttft_p99_s is None
    # timing: events in recorded order
    assert [e.ts for e in src.events] == sorted(e.ts for e in src.events)


def test_level_finished_knees_feed_the_d3_summary_and_the_banner_flag():
    st = SessionState()
    st.apply(LevelFinished(level=0, results=[LevelResult(arm="a", level=0, offered_concurrency=8)],
                           knees={"a": KneesSummary(power=PowerKneeSummary(concurrency=8, confirmed=False))}))
    summary = st.arm("a").knees_summary
    assert (summary.power.concurrency, summary.power.confirmed, summary.slo) == (8, False, None)
    assert not st.arm("a").knee_news  # an unconfirmed maximum alone is no news
    st.apply(LevelFinished(level=1, results=[LevelResult(arm="a", level=1, offered_concurrency=16)], knees={"a": KneesSummary(
        power=PowerKneeSummary(concurrency=8, confirmed=True),
        slo=SloSummary(slo_ttft_s=2.0, slo_tpot_s=0.03, c_slo=None, c_goodput=16, goodput_confirmed=False))}))
    summary = st.arm("a").knees_summary
    assert summary.power.confirmed and summary.slo.c_slo is None and summary.slo.c_goodput == 16
    assert st.arm("a").knee_news
    st.apply(KneeCalled(arm="a", definition="plateau", concurrency=8, detail="", resolved=False))
    assert st.arm("a").plateau_resolved is False


def test_headless_prints_every_knee_per_arm_when_the_ramp_ends(tmp_path):
    import asyncio
    import io

    from specmon.headless import HeadlessPrinter

    folder = make_session.write_knees(tmp_path / "k", arm="fp8-mtp")
    out = io.StringIO()
    asyncio.run(ReplaySource(folder, speed=1e9).run(HeadlessPrinter(out), asyncio.Event()))
    lines = out.getvalue().splitlines()
    assert "knee [plateau] fp8-mtp: ~10 concurrent requests (within the noise) (throughput plateau at C=10 (test))" in lines
    end = lines.index("ramp finished: done")
    assert lines[end + 1:end + 3] == [
        "knees:",
        "  fp8-mtp: knee: throughput plateau C=10 (within the noise) | also: "
        "plateau C=10 (within the noise); power knee C=10 (confirmed); "
        "SLO (TTFT<=2 s, TPOT<=30 ms) met up to C=20, goodput peak C=20 (not confirmed)"]


def test_replay_knees_per_level_are_those_of_the_levels_so_far(tmp_path):
    folder = make_session.write_knees(tmp_path / "k")
    finished = [e for e in ReplaySource(folder, speed=1e9).events if isinstance(e, LevelFinished)]
    power = [e.knees["a"].power for e in finished]
    # one level: its own maximum, unconfirmed; three: C=10 fell twice after it
    assert [(p.concurrency, p.confirmed) for p in power] == [(10, False), (10, False), (10, True)]
    assert [e.knees["a"].slo.c_slo for e in finished] == [10, 20, 20]


def test_state_stays_bounded_under_fleet_churn():
    """A fleet whose workers come and go under new names: a worker that left keeps no history
    (nothing draws it), the join/leave notes keep the newest FLEET_NOTES, and a pane's series
    copies only the points it draws."""
    from specmon.model import ArmSpec, FleetChanged
    from specmon.tui.state import FLEET_NOTES, HISTORY_POINTS

    st = SessionState()
    t = 0.0
    for gen in range(FLEET_NOTES + 50):
        name = f"w{gen}"
        st.apply(FleetChanged(ts=t, fleet="gw", added=[ArmSpec(name=name, url=f"http://127.0.0.1:{10000 + gen}")],
                              removed=[f"w{gen - 1}"] if gen else [], note=f"{name} joined"))
        for k in range(5):
            t += 1.0
            st.apply(SamplesTick(samples=[Sample(ts=t, arm=name, up=True, kv_usage=k / 10)], ts=t))
    assert st.arm_names() == [f"w{FLEET_NOTES + 49}"]
    held = sum(len(d) for a in st.arms.values() for d in a.history.values())
    assert held == 8 * 5  # only the worker still in the fleet: 8 series of its 5 ticks
    assert len(st.fleet_notes) == FLEET_NOTES and st.fleet_notes[-1].note == f"w{FLEET_NOTES + 49} joined"
    live = f"w{FLEET_NOTES + 49}"
    assert st.series(live, "kv_usage", last=2) == [0.3, 0.4]
    assert st.series(live, "kv_usage", last=0) == []
    assert st.series(live, "kv_usage", last=99) == [0.0, 0.1, 0.2, 0.3, 0.4]
    for k in range(HISTORY_POINTS + 10):  # one arm's history stays at its bound
        st.apply(SamplesTick(samples=[Sample(ts=t + k, arm=live, up=True, kv_usage=0.5)], ts=t + k))
    assert len(st.series(live, "kv_usage")) == HISTORY_POINTS


# ---- base.text and base.assemble: the panes' Text, built without rich's per-string translate
_PIECES = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


@given(_PIECES, st.sampled_from([None, True]))
@settings(max_examples=300, deadline=None)
def test_text_is_richs_text_for_any_string(plain, no_wrap):
    from rich.style import Style
    from rich.text import Text
    from specmon.tui.widgets.base import text
    style = Style(bold=True)
    ours, theirs = text(plain, style, no_wrap=no_wrap), Text(plain, style=style, no_wrap=no_wrap)
    assert (ours.plain, ours.style, ours.no_wrap, ours._spans, len(ours)) == \
        (theirs.plain, theirs.style, theirs.no_wrap, theirs._spans, len(theirs))
    assert ours.cell_len == theirs.cell_len and ours.markup == theirs.markup


@given(st.lists(st.one_of(_PIECES, st.tuples(_PIECES, st.sampled_from(["bold", "red"]))), max_size=6))
@settings(max_examples=200, deadline=None)
def test_assemble_is_text_assemble(parts):
    from rich.style import Style
    from rich.text import Text
    from specmon.tui.widgets.base import assemble
    parts = [p if isinstance(p, str) else (p[0], Style.parse(p[1])) for p in parts]
    ours, theirs = assemble(*parts), Text.assemble(*parts)
    assert ours.plain == theirs.plain and len(ours) == len(theirs)
    drawn = lambda t: [(s.start, s.end, s.style) for s in t._spans if s.end > s.start]  # noqa: E731
    assert drawn(ours) == drawn(theirs)  # (rich keeps a span of a piece that was all control codes: empty)

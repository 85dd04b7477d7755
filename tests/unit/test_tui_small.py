"""The app in an 80x24 terminal (the size of an SSH session nobody resized), driven by replays of
recorded sim sessions: every arm's six figures and its knees are on the screen, the ramp's every
level is one key (r) away, and the lines specmon lays out fit their width (nothing is cut by the
renderer, nor mid-word). At 160x48 the arm panels stay as they were.

The expected figures come from the recording's own files (samples.csv, the knees in events.jsonl),
formatted as the panes format them; the screen is read as the terminal would show it."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Optional

import pytest

from helpers.pilots import screen_text, wait_replay_end
from specmon.model import KneeCalled, LevelFinished
from specmon.session.replay import ReplaySource
from specmon.tui import fmt
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.arm_row import ArmRowsHeader
from specmon.tui.widgets.fleet import COLUMNS as FLEET_COLUMNS, DROP_FIRST as FLEET_DROP_FIRST, FleetTable
from specmon.tui.widgets.knee_banner import KneeBanner
from specmon.tui.widgets.ramp import LevelTable, RampProgress

DATA = Path(__file__).resolve().parents[1] / "data"
SESSIONS = ["session_sim_1arm", "session_demo_2arm", "session_sim_3arm"]


async def replayed(name: str, size: tuple[int, int]):
    app = SpecmonApp(ReplaySource(DATA / name, speed=1e9), "t")
    return app, app.run_test(size=size)


async def until_ended(pilot) -> None:
    await wait_replay_end(pilot, timeout=12.0, every=0.02)
    await pilot.pause(0.1)
    await pilot.pause()


def _f(row: dict, key: str) -> Optional[float]:
    return float(row[key]) if row.get(key) not in (None, "") else None


def last_samples(name: str) -> dict[str, dict]:
    """Each arm's last scrape in the recording's samples.csv (marker rows have no arm figures)."""
    out: dict[str, dict] = {}
    with open(DATA / name / "samples.csv") as f:
        for row in csv.DictReader(f):
            if row.get("arm") and row.get("up") in ("1", "True", "true"):
                out[row["arm"]] = row
    return out


def six_figures(row: dict, cap: Optional[int], speculation: bool) -> dict[str, str]:
    """The six figures of one arm as the panes write them, from its samples.csv row."""
    used, total = _f(row, "kv_used_tokens"), _f(row, "kv_capacity_tokens")
    usage = _f(row, "kv_usage")
    if usage is None and used is not None and total:
        usage = used / total
    running, queued = _f(row, "running_reqs"), _f(row, "queued_reqs")
    accept = _f(row, "accept_length")
    gpu = _f(row, "gpu_mem_used_bytes")
    return {
        "gpu": fmt.DASH if gpu is None else fmt.gib(gpu, 0 if gpu >= 100 * fmt.GIB else 1),  # used (of total)
        "kv": fmt.pct(usage),
        "accept": ("none" if not speculation else (fmt.DASH if accept is None else f"{accept:.2f}")),
        "running": fmt.num(running) + (f"/{cap}" if cap else ""),
        "queued": fmt.num(queued),
        "tok_s": fmt.rate(_f(row, "gen_tok_s")),
        "ttft": fmt.secs(_f(row, "ttft_p50_s")),
    }


def recorded_knees(name: str) -> dict[str, dict[str, float]]:
    """arm -> {definition: concurrency}: the last knee of each definition the ramp called, and the
    power knee (max tok/s over TTFT) of each arm's last finished level, for the arms the banner has
    news of (a called knee, or a confirmed power knee; an SLO ramp's verdicts are not in these)."""
    out: dict[str, dict[str, float]] = {}
    power: dict[str, tuple[float, bool]] = {}
    for ev in ReplaySource(DATA / name).events:
        if isinstance(ev, KneeCalled) and ev.definition != "predicted" and ev.concurrency is not None:
            out.setdefault(ev.arm, {})[ev.definition] = ev.concurrency
        if isinstance(ev, LevelFinished):
            for arm, summary in ev.knees.items():
                if summary.power.concurrency is not None:
                    power[arm] = (summary.power.concurrency, summary.power.confirmed)
    for arm, (c, confirmed) in power.items():
        if confirmed or arm in out:
            out.setdefault(arm, {})["power"] = c
    return out


def assert_lines_fit(widget) -> None:
    """Every line the widget lays out fits its width: the renderer cuts nothing of it."""
    lines = widget.render().split("\n")
    width = widget.size.width
    assert width > 0
    for line in lines:
        assert line.cell_len <= width, (type(widget).__name__, width, line.plain)


def gpu_word(name: str) -> str:
    """The arm lines' GPU header for a recording: 'sim' when every GPU figure in it is a simulated
    card (the demo's recording), else 'GPU'."""
    rows = [r for r in csv.DictReader(open(DATA / name / "samples.csv")) if r.get("gpu_mem_used_bytes")]
    return "sim" if rows and all(r.get("gpu_source") == "simulated" for r in rows) else "GPU"


@pytest.mark.parametrize("name", SESSIONS)
async def test_every_arms_six_figures_and_knees_at_80x24(name):
    samples = last_samples(name)
    knees = recorded_knees(name)
    app, run = await replayed(name, (80, 24))
    async with run as pilot:
        await until_ended(pilot)
        screen = screen_text(app)
        lines = screen.splitlines()
        assert len(lines) == 24 and all(len(x) <= 80 for x in lines)
        arms = app.state.arm_names()
        assert set(arms) == set(samples)
        # one arm keeps its panel at 80x24; two and three are a line each
        assert app.compact == (len(arms) > 1)
        for arm in arms:
            info = app.state.arm(arm).info
            cap = info.max_running_requests if info else None
            fig = six_figures(samples[arm], cap, app.state.arm(arm).speculation is not False)
            if app.compact:
                widget = next(w for w in app.query(ArmPanel) if w.arm_name == arm)
                assert widget.compact and widget.region.height == 1
                row = lines[widget.region.y]  # the arm's line on the screen
                cells = row.split()
                # the row's cells in the header's order: GPU GiB, KV, accept, run/cap, queue, tok/s, TTFT p50
                at = cells.index(arm) + 1
                assert cells[at].split("/")[0] == fig["gpu"], (row, fig)
                assert cells[at + 1:at + 6] == [fig["kv"], fig["accept"], fig["running"], fig["queued"],
                                                fig["tok_s"]], (row, fig)
                assert fig["ttft"] in row, (row, fig)
            else:
                panel = "\n".join(lines)
                assert f"{fig['kv']} ·" in panel and f"{fig['accept']} tok/step" in panel
                assert f"run {fig['running']} · queue {fig['queued']}" in panel
                assert f"{fig['tok_s']} tok/s" in panel and f"p50 {fig['ttft']}" in panel
                assert re.search(r"^│ GPU\s", panel, re.M)
            mine = knees.get(arm, {})
            for definition in ("queueing", "plateau")[:1 if "queueing" in mine else 2]:
                if definition in mine:  # the headline knee (queueing, else the plateau); k shows the rest
                    assert f"{definition} knee C={mine[definition]:g}" in screen, (arm, definition, mine)
        assert knees, "the recordings call knees: the banner has something to show"
        if app.compact:
            header = lines[app.query_one(ArmRowsHeader).region.y]
            assert header.split()[:8] == ["arm", gpu_word(name), "GiB", "KV", "accept", "run/cap", "queue", "tok/s"]
        # the ramp's newest level is on screen under the arms, its key in the pane's title and the footer
        last = max(r.level for r in app.state.level_rows())
        newest = [r for r in app.state.level_rows() if r.level == last]
        assert all(re.search(rf"{re.escape(r.arm)}\s+{r.offered_concurrency}\s+{re.escape(fmt.rate(r.output_tok_s))}\s",
                             screen) for r in newest), screen
        assert "r: every level" in screen and "r levels" in lines[-1] and lines[-1].rstrip().endswith("? help")
        # what specmon lays out fits: nothing cut by the renderer, nothing cut with an ellipsis
        widgets = [app.query_one(KneeBanner), app.query_one(RampProgress), app.query_one(LevelTable)]
        if app.compact:
            widgets += [app.query_one(ArmRowsHeader)] + list(app.query(ArmPanel))
        for w in widgets:
            assert_lines_fit(w)
            if not isinstance(w, KneeBanner):
                assert "…" not in w.render().plain, (type(w).__name__, w.render().plain)
        # the knee's own words, where the banner has room for them, stop between two words
        with app.state.lock:
            details = [k.detail for a in app.state.arms.values() for k in a.knees[-1:] if k.detail]
        for line in app.query_one(KneeBanner).render().plain.splitlines():
            if "…" in line:
                part = line.rsplit("  ", 1)[-1][:-1]
                detail = next(d for d in details if d.startswith(part))
                assert detail[len(part)] == " ", (part, detail)


async def test_the_ramp_table_is_one_key_away_at_80x24():
    name = "session_demo_2arm"
    levels = list(csv.DictReader(open(DATA / name / "levels.csv")))
    app, run = await replayed(name, (80, 24))
    async with run as pilot:
        await until_ended(pilot)
        table = app.query_one(LevelTable)
        assert app.compact and table.tail
        before = screen_text(app)
        first = [r for r in levels if int(r["level"]) == 0]
        assert "↑ 7 earlier levels" in before
        assert not any(re.search(rf"{re.escape(r['arm'])}\s+10\s", before) for r in first)
        await pilot.press("r")
        await pilot.pause(0.1)
        screen = screen_text(app)
        assert app.ramp_view and not table.tail and "r: the arms" in screen
        assert not app.query_one("#arms").display  # the ramp in place of the arms
        # the table opens at its newest level, and both plots
        for r in [r for r in levels if int(r["level"]) == 9]:
            assert re.search(rf"{re.escape(r['arm'])}\s+40\s", screen), screen
        assert "output tok/s vs C" in screen and "TTFT p50 vs C" in screen
        # the keys scroll the table to the first level's rows, which the compact screen had no room for
        await pilot.press("home")
        await pilot.pause(0.1)
        screen = screen_text(app)
        for r in first:
            assert re.search(rf"{re.escape(r['arm'])}\s+10\s+{re.escape(fmt.rate(float(r['output_tok_s'])))}\s",
                             screen), screen
        await pilot.press("r")
        await pilot.pause(0.1)
        assert not app.ramp_view and table.tail and app.query_one("#arms").display
        assert f"{gpu_word(name)} GiB" in screen_text(app)


@pytest.mark.parametrize("name", SESSIONS)
async def test_160x48_keeps_the_arm_panels(name):
    app, run = await replayed(name, (160, 48))
    async with run as pilot:
        await until_ended(pilot)
        assert not app.compact and not app.query_one("RampPane").has_class("-tail")  # (its table follows the newest level)
        panels = list(app.query(ArmPanel))
        assert panels and len({p.region.y for p in panels}) == 1  # side by side
        for p in panels:
            assert p.parts() == ["header", "gpu", "kv", "accept", "queue", "throughput", "ttft"]
            assert not p.compact and p.region.height > 1
        assert not app.query_one(ArmRowsHeader).display
        assert "r levels" in screen_text(app).splitlines()[-1]


async def test_resizing_goes_compact_and_back():
    app, run = await replayed("session_sim_3arm", (160, 48))
    async with run as pilot:
        await until_ended(pilot)
        assert not app.compact
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.2)
        assert app.compact and all(p.parts() == ["row"] and p.region.height == 1 for p in app.query(ArmPanel))
        await pilot.resize_terminal(160, 48)
        await pilot.pause(0.2)
        assert not app.compact and not any("row" in p.parts() or p.region.height == 1 for p in app.query(ArmPanel))


async def test_the_fleet_table_at_80x24():
    # seven workers behind a gateway: the fleet table (its own layout) instead of arm lines
    name = "session_gateway_fleet"
    app, run = await replayed(name, (80, 24))
    async with run as pilot:
        await until_ended(pilot)
        screen = screen_text(app)
        assert app.fleet_mode and not app.compact
        for arm in app.state.arm_names():
            assert arm in screen
        for arm, by_definition in recorded_knees(name).items():
            # a worker's knee is at the fleet's C (ramped through the gateway); the headline first
            definition = "queueing" if "queueing" in by_definition else "plateau"
            assert f"{definition} knee fleet C={by_definition[definition]:g}" in screen, screen
        # the footer whole, the table's sort key in it
        assert "r levels" in screen.splitlines()[-1] and "o sort" in screen.splitlines()[-1]
        assert screen.splitlines()[-1].rstrip().endswith("? help")
        assert app.query_one(LevelTable).tail and "↑" in screen
        # the table fits the width: the columns that do not give way whole (the least telling
        # first), the worker's name never; nothing runs past the right edge
        table = app.query_one(FleetTable)
        assert table.virtual_size.width <= table.size.width
        shown = [str(c.key.value) for c in table.ordered_columns]
        assert shown[0] == "worker" and len(shown) < len(FLEET_COLUMNS)
        gone = [k for k in FLEET_DROP_FIRST if k not in shown]
        assert gone and gone == list(FLEET_DROP_FIRST[:len(gone)])  # in the order they give way
        headers = dict(FLEET_COLUMNS)
        head_row = next(line for line in screen.splitlines() if " state " in line)
        assert all(headers[k] in head_row for k in shown) and "DP imbalance" not in head_row
        for line in screen.splitlines():
            assert not line.rstrip().endswith("…"), line  # no cell cut at the edge
        await pilot.press(*["right"] * 40)  # nothing past the edge to scroll to
        await pilot.pause(0.2)
        assert table.scroll_x == 0
        # wider, the columns come back
        await pilot.resize_terminal(160, 48)
        await pilot.pause(0.3)
        assert [str(c.key.value) for c in table.ordered_columns] == [k for k, _ in FLEET_COLUMNS]
        assert "DP imbalance" in screen_text(app)


async def test_live_arms_at_80x24_one_of_them_down(tmp_path):
    # Live: a real simulated server and an address nobody listens on, attached at 80x24. The
    # live arm's line carries its figures as they arrive; the other says why it has none.
    import sys

    from specmon.model import ArmSpec
    from specmon.session.live import LiveSession

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers.simproc import free_port, start_sim

    with start_sim("--enable-metrics", "--profile", "nvfp4-mtp", speed=20, timeout=90) as sim:
        arms = [ArmSpec(name="nvfp4-mtp", url=sim.url), ArmSpec(name="gone", url=f"http://127.0.0.1:{free_port()}")]
        live = LiveSession(arms, interval=0.3, out_dir=tmp_path / "s", mode="attach")
        app = SpecmonApp(live, "live")
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(600):
                up, down = app.state.arm("nvfp4-mtp").last, app.state.arm("gone").last
                if up is not None and up.up and app.state.arm("nvfp4-mtp").info and down is not None:
                    break
                await pilot.pause(0.05)
            await pilot.pause(0.5)
            assert app.compact  # two panels do not fit 24 rows
            rows = {w.arm_name: w for w in app.query(ArmPanel)}
            assert all(w.parts() == ["row"] for w in rows.values())
            lines = screen_text(app).splitlines()
            live_line, gone_line = lines[rows["nvfp4-mtp"].region.y], lines[rows["gone"].region.y]
            assert "/56" in live_line and "%" in live_line, live_line  # the request cap from /server_info; KV
            # the simulator's card (the only GPU figure here): the header says it is simulated
            s = app.state.arm("nvfp4-mtp").last
            assert s.gpu_source == "simulated" and s.gpu_mem_used_bytes
            assert f"{fmt.gib(s.gpu_mem_used_bytes)}/{fmt.gib(s.gpu_mem_total_bytes)}" in live_line, live_line
            assert "sim GiB" in lines[app.query_one(ArmRowsHeader).region.y]
            down = app.state.arm("gone").last
            assert not down.up and down.state in gone_line and "%" not in gone_line, gone_line
            assert live_line.startswith("›") and not gone_line.startswith("›")  # the focus mark
            await pilot.press("tab")
            await pilot.pause(0.1)
            lines = screen_text(app).splitlines()
            assert lines[rows["gone"].region.y].startswith("›")
            # enter opens the focused arm's detail view, with its full panes
            await pilot.press("enter")
            await pilot.pause(0.2)
            assert app.screen.__class__.__name__ == "ArmDetailScreen" and app.screen.arm_name == "gone"
            await pilot.press("escape")
            await pilot.press("q")


async def test_a_layouts_panes_choose_the_lines_columns(tmp_path):
    # `panes: [arms, kv, ttft, levels]` in a layout: the compact lines show KV and TTFT only
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from snapshot_apps import make_session

    folder = make_session.write(tmp_path / "s", n_arms=3, levels=(4, 8), level_s=2, legacy=False)
    log = folder / "events.jsonl"
    lines = log.read_text().splitlines()
    assert '"panes":null' in lines[0]
    lines[0] = lines[0].replace('"panes":null', '"panes":["arms","kv","ttft","levels"]')
    log.write_text("\n".join(lines) + "\n")
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(80, 24)) as pilot:
        await until_ended(pilot)
        assert app.compact
        screen = screen_text(app).splitlines()
        header = screen[app.query_one(ArmRowsHeader).region.y].split()
        assert header == ["arm", "KV", "TTFT", "p50", "p90"], header
        for w in app.query(ArmPanel):
            assert w.parts() == ["row"]
            s = app.state.arm(w.arm_name).last
            cells = screen[w.region.y].split()
            assert fmt.pct(s.kv_usage) in cells and fmt.secs(s.ttft_p50_s) in " ".join(cells)
            assert not any("/48" in c for c in cells)  # no run/cap column


async def test_knees_that_do_not_fit_one_line_go_on_the_next_whole(tmp_path):
    # one arm with a plateau within the noise, a power knee, an SLO verdict and a goodput knee:
    # more than 80 columns of knees; at 80 they flow onto a second line, each whole
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from snapshot_apps import make_session

    folder = make_session.write_knees(tmp_path / "k")
    items = ["plateau C=10 (within the noise)", "power C=10", "SLO met to C=20 (TTFT≤2 s, TPOT≤30 ms)",
             "goodput C=20?"]
    for width, lines_expected in ((200, 1), (80, 2)):
        app = SpecmonApp(ReplaySource(folder, speed=1e9), "t")
        async with app.run_test(size=(width, 24)) as pilot:
            await until_ended(pilot)
            await pilot.press("k")  # every knee (one headline knee per arm until then)
            await pilot.pause()
            banner = app.query_one(KneeBanner)
            lines = banner.render().plain.splitlines()
            assert len(lines) == lines_expected == banner.size.height, lines
            assert_lines_fit(banner)
            for item in items:
                assert any(item in line for line in lines), (item, lines)
            if width == 80:
                assert lines[1].startswith(" " * 6) and "KNEE" not in lines[1]  # under the first, indented


@pytest.mark.parametrize("width", [80, 60, 44])
async def test_the_status_bar_gives_way_by_whole_items_and_words(width):
    # A long title, a session folder, a stopped session with a long reason and the display
    # paused: at 80 columns and below the bar drops whole items and cuts long ones between words
    # (an ellipsis after the last whole word), never inside a word; the pause is still said.
    from specmon.tui.widgets.status_bar import StatusBar

    source = ReplaySource(DATA / "session_sim_3arm", speed=1e9)
    source.out_dir = Path("/tmp/specmon-sessions/2026-12-01T15-00-00")
    title = "specmon attach http://127.0.0.1:30000 http://127.0.0.1:30001 http://127.0.0.1:30002"
    app = SpecmonApp(source, title)
    async with app.run_test(size=(width, 24)) as pilot:
        await until_ended(pilot)
        bar = app.query_one(StatusBar)
        reason = "replay ended: the recording has no more events after 12:00:41"
        bar.stopped = reason
        await pilot.press("p")  # display paused
        await pilot.pause()
        plain = bar.render().plain
        line = screen_text(app).splitlines()[0]
        assert line.rstrip() == plain.rstrip() and len(plain) <= width
        assert "DISPLAY PAUSED" in plain and "replay" in plain  # the pause and the mode stay
        words = set(" ".join([title, reason, "ended:", "specmon", "DISPLAY PAUSED (still recording)",
                              str(source.out_dir), "3 arms", app.mode_label, fmt.duration(app.state.elapsed_s)]
                             + [f"{len(app.state.markers)} marks"]).split())
        for token in plain.split():
            assert token.removesuffix("…") in words, (token, plain)
        assert "ended: replay" in plain or width < 60

"""A ramp level's samples in memory (session/level_samples.py, LiveSession.samples_for): only the
fields the level statistics read, the same statistics as from the whole Samples, any level
length without the session's folder, bounded by thinning, and a ramp's folder free to rotate."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from specmon.analysis.fleet_levels import fleet_samples, worker_level
from specmon.analysis.levels import Window, level_result
from specmon.load.client import RequestOutcome
from specmon.model import ArmSpec, LevelResult, Sample, SamplesTick
from specmon.session.folder import EVENTS_FILE
from specmon.session.level_samples import KEPT_FIELDS, ROW_BYTES, LevelSamples
from specmon.session.live import LiveSession
from specmon.session.replay import read_event_log
from specmon.session.segments import Rotation

T0 = 1_000_000.0
FIXTURE = Path(__file__).resolve().parent.parent / "data" / "session_gateway_fleet"

# What the ring of whole Samples that this replaced held (SAMPLES_KEPT across arms, at least
# 120 an arm); a longer level read its first samples back from samples.csv.
OLD_RING = 10_800


def _ramp(arms=()):
    """What LiveSession asks of its ramp outside run(): its arms (for a gateway arm's fleet)."""
    return SimpleNamespace(arms=list(arms))


def _live(arms, **kw) -> LiveSession:
    kw.setdefault("ramp", _ramp())
    kw.setdefault("record", False)
    return LiveSession(arms, interval=1.0, **kw)


def _sample(rng: random.Random, arm: str, ts: float) -> Sample:
    """A busy, noisy reading: unknowns, downs, speculation on/off/unknown, and figures that no
    statistic reads (they must not matter)."""
    def maybe(v):
        return None if rng.random() < 0.1 else v

    if rng.random() < 0.05:
        return Sample(ts=ts, arm=arm, up=False, state=rng.choice(["down", "timeout", "refused"]),
                      reason="connection refused", spec_enabled=rng.choice([None, True]))
    cap = 100_000
    used = maybe(rng.randint(0, cap))
    return Sample(
        ts=ts, arm=arm, up=True, source="metrics", running_reqs=maybe(rng.randint(0, 40)),
        queued_reqs=maybe(rng.randint(0, 12)), kv_used_tokens=used, kv_capacity_tokens=maybe(cap),
        kv_usage=maybe(rng.choice([rng.random(), 0.96, 1.2])), gen_tok_s=maybe(rng.random() * 5000),
        accept_length=maybe(1 + 3 * rng.random()), accept_rate=maybe(rng.random()),
        spec_enabled=rng.choice([None, True, False]), ttft_p50_s=maybe(rng.random()),
        ttft_p90_s=maybe(rng.random() * 2), ttft_p99_s=maybe(rng.random() * 3), ttft_mean_s=maybe(rng.random()),
        queue_time_p50_s=maybe(rng.random() / 3), queue_time_mean_s=maybe(rng.random() / 2),
        itl_mean_s=rng.random(), gpu_power_w=700 * rng.random(), scrape_s=rng.random() / 10,
        server_rss_bytes=rng.randint(0, 2 ** 34), worker="http://w", role="regular")


def _outcome(i, sent, ttft, n, itl):
    o = RequestOutcome(request_id=str(i), t_scheduled_wall=T0 + sent, t_scheduled=sent)
    o.t_sent, o.t_sent_wall = sent, T0 + sent
    o.token_events = [(sent + ttft, 1)] + [(sent + ttft + k * itl, 1) for k in range(1, n)]
    o.t_end = o.token_events[-1][0]
    o.completion_tokens, o.prompt_tokens = n, 100
    o.final_meta = {}  # no per-request queue time or acceptance: the samples' figures are used
    return o


def _closed_loop(c, until):
    outs, i = [], 0
    for _ in range(c):
        t = 0.0
        while t < until:
            outs.append(_outcome(i, t, 1.0, 11, 0.1))
            i += 1
            t = outs[-1].t_end
    return outs


def _feed(live: LiveSession, arms, ticks: int, seed: int = 1) -> dict[str, list[Sample]]:
    """ticks ticks of every arm through the session's keeper; each arm's whole Samples."""
    rng, full = random.Random(seed), {a: [] for a in arms}
    for k in range(ticks):
        for a in arms:
            s = _sample(rng, a, T0 + k)
            full[a].append(s)
            live._keep(a, s)
    return full


def _projected(s: Sample) -> dict:
    return {f: getattr(s, f) for f in KEPT_FIELDS}


def _same(a: LevelResult, b: LevelResult) -> None:
    assert dataclasses.asdict(a) == dataclasses.asdict(b)


def test_a_level_that_fit_the_old_ring_gets_the_same_statistics():
    live = _live([ArmSpec(name="a", url="http://a"), ArmSpec(name="b", url="http://b")])
    live.set_level(0, 8)
    full = _feed(live, ["a", "b"], 600)
    outs = _closed_loop(8, 600.0)
    for t0, t1 in ((T0, T0 + 599), (T0 + 30, T0 + 500.5), (T0 + 100, T0 + 100), (T0 + 700, T0 + 800)):
        for arm in ("a", "b"):
            whole = [s for s in full[arm] if t0 <= s.ts <= t1]  # what the ring gave
            got = live.samples_for(arm, t0, t1)
            assert [_projected(s) for s in got] == [_projected(s) for s in whole]
            assert all(type(x.running_reqs) is type(y.running_reqs) for x, y in zip(got, whole))
            for max_running in (None, 30):
                args = (arm, 0, 8, outs, Window(t0, t1), T0, T0 + 600)
                _same(level_result(*args, got, max_running=max_running),
                      level_result(*args, whole, max_running=max_running))
            _same(worker_level(arm, "http://w", 0, 8, got, share_of=2, max_running=30),
                  worker_level(arm, "http://w", 0, 8, whole, share_of=2, max_running=30))
    r = level_result("a", 0, 8, outs, Window(T0 + 30, T0 + 590), T0, T0 + 600, live.samples_for("a", T0 + 30, T0 + 590))
    assert r.running_mean is not None and r.kv_usage_max is not None and r.queue_time_mean_s is not None


def test_a_gateway_arm_sums_its_workers_as_from_the_whole_samples():
    workers = [ArmSpec(name=f"w{i}", url=f"http://w{i}", fleet="gw") for i in range(3)]
    gateway = ArmSpec(name="gw", url="http://gw")
    fleet = SimpleNamespace(name="gw", kind="gateway", url="http://gw")
    live = _live(workers, ramp=_ramp([gateway]), fleets=[fleet])
    live.set_level(2, 12)
    full = _feed(live, [w.name for w in workers], 400, seed=7)
    t0, t1 = T0 + 20, T0 + 380
    got = live.samples_for("gw", t0, t1)
    whole = fleet_samples({w: [s for s in ss if t0 <= s.ts <= t1] for w, ss in full.items()}, "gw")
    # the same ticks, sums and downs; a down tick names the worker's state, not its words
    unworded = [dataclasses.replace(s, reason=None) for s in got]
    assert unworded == [dataclasses.replace(s, reason=None) for s in whole]
    assert any(not s.up for s in got) and any(s.up for s in got)
    outs = _closed_loop(12, 400.0)
    _same(level_result("gw", 2, 12, outs, Window(t0, t1), T0, T0 + 400, got, max_running=90),
          level_result("gw", 2, 12, outs, Window(t0, t1), T0, T0 + 400, whole, max_running=90))


def test_a_level_longer_than_the_old_ring_needs_no_folder():
    # no writer, no folder: every tick of a level far longer than the old ring
    live = _live([ArmSpec(name="a", url="http://a")], out_dir=Path("/nonexistent/specmon"))
    assert live.writer is None
    live.set_level(0, 8)
    ticks = OLD_RING + 9_200
    full = _feed(live, ["a"], ticks)
    got = live.samples_for("a", T0, T0 + ticks)
    assert len(got) == ticks and live._level_samples.stride == 1
    assert [_projected(s) for s in got] == [_projected(s) for s in full["a"]]
    outs = _closed_loop(8, 300.0)  # the client side is not under test here: a few requests
    w = Window(T0 + 60, T0 + ticks - 1)
    _same(level_result("a", 0, 8, outs, w, T0, T0 + ticks, live.samples_for("a", w.t0, w.t1)),
          level_result("a", 0, 8, outs, w, T0, T0 + ticks, [s for s in full["a"] if w.t0 <= s.ts <= w.t1]))


def test_64_arms_keep_every_tick_where_the_old_ring_kept_168():
    arms = [f"w{i}" for i in range(64)]
    live = _live([ArmSpec(name=a, url=f"http://{a}") for a in arms])
    live.set_level(0, 64)
    full = _feed(live, arms, 600)  # 600 ticks each; the old ring held 10,800 // 64 = 168 an arm
    for a in arms[:: 9]:
        assert [_projected(s) for s in live.samples_for(a, 0, 2 * T0)] == [_projected(s) for s in full[a]]


def test_a_new_level_starts_empty_and_a_worker_that_left_is_let_go():
    live = _live([ArmSpec(name="a", url="http://a")])
    live.set_level(0, 2)
    _feed(live, ["a", "b"], 10)
    assert live._level_samples.kept("b") == 10
    live._level_samples.drop("b")
    assert live._level_samples.rows == 10 and live.samples_for("b", 0, 2 * T0) == []
    live.set_level(1, 4)
    assert live.samples_for("a", 0, 2 * T0) == [] and live._level_samples.rows == 0
    live.set_level(None, None)  # between levels nothing is kept
    _feed(live, ["a"], 5)
    assert live._level_samples.rows == 0


def test_without_a_ramp_nothing_is_kept():
    live = _live([ArmSpec(name="a", url="http://a")], ramp=None)
    live.set_level(0, 2)
    _feed(live, ["a"], 20)
    assert live._level_samples.rows == 0


def test_past_its_budget_a_level_is_thinned_the_same_ticks_for_every_arm():
    kept = LevelSamples(budget_bytes=ROW_BYTES * 1_000)
    assert kept.max_rows == 1_000
    arms, ticks = ["w0", "w1", "w2"], 5_000
    running, rng = {}, random.Random(5)
    for k in range(ticks):
        for a in arms:
            r = rng.randint(0, 40) + k // 250  # noise on a slow climb
            running[(a, k)] = r
            kept.add(a, Sample(ts=T0 + k, arm=a, up=True, running_reqs=r, queued_reqs=0))
            assert kept.rows <= kept.max_rows
    # 15,000 rows into 1,000: one tick in 16 kept (5,000 / 16 x 3 = 939), from the level's first
    assert kept.stride == 16 and kept.rows == 3 * len(range(0, ticks, 16))
    for a in arms:
        got = kept.samples(a, 0, 2 * T0)
        assert [s.ts for s in got] == [T0 + k for k in range(0, ticks, 16)]
        assert [s.running_reqs for s in got] == [running[(a, k)] for k in range(0, ticks, 16)]
        # the level's mean, from one tick in 16: within three standard errors (11.8 / sqrt(313))
        every = [running[(a, k)] for k in range(ticks)]
        assert sum(s.running_reqs for s in got) / len(got) == pytest.approx(sum(every) / ticks, abs=2.0)
    # a fleet's workers still sum tick by tick: every thinned tick up, with all three workers
    summed = fleet_samples({a: kept.samples(a, 0, 2 * T0) for a in arms}, "gw")
    assert len(summed) == len(range(0, ticks, 16)) and all(s.up for s in summed)
    assert summed[1].running_reqs == sum(running[(a, 16)] for a in arms)


def test_thinning_in_the_middle_of_a_tick_keeps_the_arms_together():
    kept = LevelSamples(budget_bytes=ROW_BYTES * 10)
    for k in range(20):  # the 11th row (tick 3, second arm) thins mid-tick
        for a in ("x", "y", "z"):
            kept.add(a, Sample(ts=T0 + k, arm=a, up=True, running_reqs=k, queued_reqs=0))
    ts = [[s.ts for s in kept.samples(a, 0, 2 * T0)] for a in ("x", "y", "z")]
    assert ts[0] == ts[1] == ts[2] and kept.rows <= 10
    assert all((t - T0) % kept.stride == 0 for t in ts[0])


def test_a_row_costs_row_bytes_where_a_sample_cost_kilobytes():
    kept = LevelSamples()
    rng = random.Random(3)
    for k in range(5_000):
        kept.add("a", _sample(rng, "a", T0 + k))
    rows = kept._arms["a"]
    used = sum(c.buffer_info()[1] * c.itemsize for c in rows.columns())
    assert used == ROW_BYTES * 5_000 and ROW_BYTES <= 128
    # 20 MiB: some 170,000 rows, against the old ring's 10,800 whole Samples
    assert kept.max_rows >= 16 * OLD_RING


def test_a_ramp_folder_rotates_and_its_level_still_reads_every_sample(tmp_path):
    """Nothing reads the folder back: a ramp's session rotates as an attach does."""
    events = read_event_log(FIXTURE / EVENTS_FILE)  # a recorded fleet: 44 ticks, 4 workers
    ticks = [e for e in events if isinstance(e, SamplesTick)]
    arms = sorted({s.arm for t in ticks for s in t.samples})
    live = _live([ArmSpec(name=a, url=f"http://{a}") for a in arms], record=True, out_dir=tmp_path,
                 rotation=Rotation(every_s=None, max_bytes=16384))
    live.set_level(0, 4)
    for e in events:
        live.writer(e)
        if isinstance(e, SamplesTick):
            for s in e.samples:
                live._keep(s.arm, s)
    live.writer.close()
    assert live.writer.error is None
    assert any(p.name.startswith("samples.0") for p in tmp_path.iterdir())  # rotated
    for a in arms:
        whole = [s for t in ticks for s in t.samples if s.arm == a]
        assert len(whole) >= 20
        assert [_projected(s) for s in live.samples_for(a, 0, 2 * whole[-1].ts)] == [_projected(s) for s in whole]


class _Watched(Sample):
    """A Sample that notes every field read of it."""

    read: set = set()

    def __getattribute__(self, name):
        if not name.startswith("__"):
            _Watched.read.add(name)
        return object.__getattribute__(self, name)


def test_the_statistics_read_no_field_that_is_not_kept():
    """Should level_result, worker_level or fleet_samples come to read another field of a
    Sample, LevelSamples must keep it too (KEPT_FIELDS)."""
    rng = random.Random(11)
    watched = [_Watched(**{f.name: getattr(s, f.name) for f in dataclasses.fields(Sample)})
               for s in (_sample(rng, a, T0 + k) for k in range(300) for a in ("w0", "w1"))]
    _Watched.read = set()
    outs = _closed_loop(4, 300.0)
    w = Window(T0 + 10, T0 + 290)
    for arm in ("w0", "w1"):
        mine = [s for s in watched if s.arm == arm]
        level_result(arm, 0, 4, outs, w, T0, T0 + 300, mine, max_running=30)
        level_result(arm, 0, 4, [], w, T0, T0 + 300, mine, max_running=30, offered_rate=2.0)
        worker_level(arm, "http://w", 0, 4, mine, share_of=2, max_running=30)
    fleet_samples({a: [s for s in watched if s.arm == a] for a in ("w0", "w1")}, "gw")
    assert {"running_reqs", "ttft_p99_s", "kv_used_tokens"} <= _Watched.read  # it watches
    assert _Watched.read <= set(KEPT_FIELDS) | {"reason"}, _Watched.read - set(KEPT_FIELDS)

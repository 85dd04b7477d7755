"""The ramp against servers that refuse it, reject its key, or die, and a kill -9 of the ramp:
real servers on 127.0.0.1 (`specmon sim` with its fault switches, or the small HTTP server below
for what the simulator cannot say: 429 with Retry-After, 403)."""

import asyncio
import http.server
import json
import os
import sys
import time
from email.utils import formatdate

import pytest

from helpers.simproc import REPO, start_sim
from helpers.records import rows
from specmon.load import native
from specmon.load.client import GenerateClient, RequestOutcome
from specmon.load.workload import Workload
from specmon.model import ArmSpec, LevelFinished, Marker, RampFinished, RampPlan, RequestFinished
from specmon.session.live import LiveSession
from specmon.session.ramp import BACKOFF_MAX_S, RETRY_AFTER_CAP_S, Backoff, RampDriver
from helpers.ramps import ramp_cli, RefusingServer

sys.path.insert(0, str(REPO / "benchmarks"))


def run_ramp(arms, plan, out, interval=0.5):
    ramp = RampDriver(arms, plan)
    live = LiveSession(arms, interval=interval, out_dir=out, ramp=ramp, isl=plan.input_len, osl=plan.output_len)
    events = []

    async def main():
        return await live.run(events.append, asyncio.Event())

    t = time.monotonic()
    reason = asyncio.run(main())
    return ramp, events, reason, time.monotonic() - t


# --------------------------------------------------------------------------------------------
# A small real HTTP/1.1 server: answers like an SGLang server on every path but /generate,
# which answers `status` (with `headers`) to every request, and records when each came.


# --------------------------------------------------------------------------------------------
# 1. 429/503: back off per stream


def test_backoff_schedule_honours_retry_after_and_resets_on_success():
    def outcome(status, http=None, retry=None, no_answer=None):
        o = RequestOutcome(request_id="r", t_scheduled_wall=0.0, t_scheduled=0.0)
        o.status, o.http_status, o.retry_after_s, o.no_answer = status, http, retry, no_answer
        return o

    b = Backoff()
    waits = [b.after(outcome("error", 503)) for _ in range(8)]
    steps = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]  # capped at 1 s, as README says
    assert all(s / 2 <= w <= s for w, s in zip(waits, steps)), waits  # jittered in [step/2, step]
    assert len(set(waits)) == len(waits)  # jitter: not two alike
    assert b.after(outcome("ok", 200)) == 0.0 and b.step == 0.0  # success resets
    assert b.after(outcome("error", 429, retry=1.5)) == 1.5  # Retry-After is honoured...
    assert b.after(outcome("error", 429, retry=3600.0)) == RETRY_AFTER_CAP_S  # ... capped
    assert b.after(outcome("error", 500)) > 0.0  # any 4xx/5xx backs off too (a broken server)
    assert b.after(outcome("error", 404)) > 0.0
    assert b.after(outcome("ok", 200)) == 0.0
    assert 0.025 <= b.after(outcome("error", no_answer="connection refused")) <= 0.05
    assert max(Backoff().after(outcome("error", 503)) for _ in range(50)) <= BACKOFF_MAX_S


def test_client_reads_the_status_and_retry_after_of_a_429():
    date = formatdate(time.time() + 30, usegmt=True)
    for header, expected in (("7", 7.0), (date, 30.0), ("soon", None)):
        with RefusingServer(429, [("Retry-After", header)]) as srv:
            async def main():
                c = GenerateClient(srv.url, max_concurrency=1)
                o = RequestOutcome(request_id="r", t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
                await c.generate(Workload(input_len=8).prompt(0), 4, o)
                await c.aclose()
                return o
            o = asyncio.run(main())
        assert o.status == "error" and o.error.startswith("HTTP 429") and o.http_status == 429
        assert o.no_answer is None
        if expected is None:
            assert o.retry_after_s is None
        else:
            assert o.retry_after_s == pytest.approx(expected, abs=1.5)


def test_429_with_retry_after_is_honoured_per_stream(tmp_path):
    """Retry-After: 1 on every /generate: each of the 2 streams sends about once a second (it
    sent thousands a second before), and the level says it spent its time backing off."""
    with RefusingServer(429, [("Retry-After", "1")]) as srv:
        plan = RampPlan(levels=[2], input_len=32, output_len=4, level_duration_s=3.5, settle_s=0)
        ramp, events, reason, wall = run_ramp([ArmSpec(name="r", url=srv.url)], plan, tmp_path)
        generate = list(srv.generate)
    ts = sorted(t for _, t in generate)
    assert 2 * 3 <= len(ts) <= 2 * 5, ts
    # Connections are pooled, so which stream sent what is not on the wire; but 2 streams that
    # each wait 1 s send at most 2 requests in any second.
    assert min(b - a for a, b in zip(ts, ts[2:])) >= 0.95, ts
    reqs = rows(tmp_path / "requests.csv")
    assert len(reqs) == len(generate) and all(r["error"].startswith("HTTP 429") for r in reqs)
    lv = rows(tmp_path / "levels.csv")[0]
    assert lv["valid"] == "0" and "backing off (" in lv["invalid_reason"], lv["invalid_reason"]
    assert "429 Too Many Requests" in lv["invalid_reason"] and "client" not in lv["invalid_reason"]
    client = json.loads((tmp_path / "session.json").read_text())["load_client"][0]
    assert client["reader"] == native.READER  # "C", or "Python" where _fastread is not built
    stats = client["backoff"]["r"]
    assert stats["http_429"] == len(reqs) and stats["backoff_share"] > 0.5
    marks = [e.label for e in events if isinstance(e, Marker)]
    assert any("429 Too Many Requests" in m and "Retry-After 1 s" in m for m in marks), marks


def test_retry_after_beyond_the_cap_does_not_hold_the_level_open(tmp_path):
    with RefusingServer(503, [("Retry-After", "3600")]) as srv:
        plan = RampPlan(levels=[2, 2], input_len=32, output_len=4, level_duration_s=1.0, settle_s=0)
        ramp, events, reason, wall = run_ramp([ArmSpec(name="r", url=srv.url)], plan, tmp_path)
        generate = list(srv.generate)
    assert reason == "ramp done"
    assert len(generate) == 4  # one per stream per level: each waits out the rest of its level
    finished = [e for e in events if isinstance(e, LevelFinished)]
    assert len(finished) == 2 and all(e.results[0].duration_s < 2.0 for e in finished)


def test_503_server_gets_a_handful_not_thousands(tmp_path):
    """--fault-503-above 0: every /generate is refused. Before: ~700 requests a second per
    stream; now each stream's waits double from 50 ms to 1 s."""
    with start_sim("--profile", "fp8-mtp", "--fault-503-above", "0", speed=50) as sim:
        plan = RampPlan(levels=[4], input_len=64, output_len=8, level_duration_s=150, settle_s=0)  # 3 s wall
        ramp, events, reason, wall = run_ramp([ArmSpec(name="sim", url=sim.url)], plan, tmp_path)
    reqs = rows(tmp_path / "requests.csv")
    # per stream in 3 s: waits of at least 25, 50, 100, 200, 400, 800, 1000 ms: at most 8 requests
    assert 4 <= len(reqs) <= 4 * 9, len(reqs)
    assert all(r["status"] == "error" and r["error"].startswith("HTTP 503") for r in reqs)
    lv = rows(tmp_path / "levels.csv")[0]
    assert int(lv["failed"]) == len(reqs)
    assert "streams spent" in lv["invalid_reason"] and "503 Service Unavailable" in lv["invalid_reason"]
    assert "client held" not in lv["invalid_reason"]
    stats = json.loads((tmp_path / "session.json").read_text())["load_client"][0]["backoff"]["sim"]
    assert stats["http_503"] == len(reqs) and stats["backoff_share"] >= 0.5


def test_503_above_capacity_backs_off_only_the_surplus(tmp_path):
    """2 slots, 8 streams: the refused streams back off and retry, the level still runs at the
    server's pace, and its reason puts the back-off, not the client, first when it blames."""
    with start_sim("--profile", "fp8-mtp", "--fault-503-above", "2", speed=50) as sim:
        plan = RampPlan(levels=[8], input_len=64, output_len=32, level_duration_s=150, settle_s=0)
        ramp, events, reason, wall = run_ramp([ArmSpec(name="sim", url=sim.url)], plan, tmp_path)
    reqs = rows(tmp_path / "requests.csv")
    refused = [r for r in reqs if r["error"].startswith("HTTP 503")]
    ok = [r for r in reqs if r["status"] == "ok"]
    assert ok and refused
    # Before: ~2,000 refusals in these 3 s (6 surplus streams with no pause between requests).
    assert len(refused) < 400, len(refused)
    lv = rows(tmp_path / "levels.csv")[0]
    assert "client held only" not in (lv["invalid_reason"] or "")
    stats = json.loads((tmp_path / "session.json").read_text())["load_client"][0]["backoff"]["sim"]
    assert stats["http_503"] == len(refused) and stats["backoff_s"] > 0


# --------------------------------------------------------------------------------------------
# 2. 401/403: stop the arm


def test_403_stops_the_arm_for_the_rest_of_the_ramp(tmp_path):
    with RefusingServer(403) as srv:
        plan = RampPlan(levels=[4, 8, 16], input_len=32, output_len=4, level_duration_s=30, settle_s=0)
        ramp, events, reason, wall = run_ramp([ArmSpec(name="r", url=srv.url)], plan, tmp_path)
        generate = list(srv.generate)
    assert len(generate) <= 4  # the first answer stops the arm; at most the first C were out
    assert wall < 15  # not the planned 90 s: nothing is left to send to
    assert reason.startswith("ramp stopped") and ramp.denied["r"].endswith(
        "answered 403 Forbidden: it wants an API key: pass --api-key-env VAR")
    assert [e for e in events if isinstance(e, RampFinished)][0].reason.startswith("stopped")
    marks = [e.label for e in events if isinstance(e, Marker) and "403" in e.label]
    assert len(marks) == 1 and f"server at {srv.url}" in marks[0]
    lv = rows(tmp_path / "levels.csv")
    assert len(lv) == 1 and "403 Forbidden" in lv[0]["invalid_reason"]


def test_wrong_key_stops_the_ramp_and_exits_2(tmp_path):
    with start_sim("--profile", "fp8-mtp", "--api-key", "right", speed=50) as sim, \
            start_sim("--profile", "fp8-mtp", speed=50) as ok:
        env = dict(os.environ, SIM_KEY="wrong")  # the second sim has no key: it ignores the header
        p, out = ramp_cli(tmp_path / "s", sim.url, "--name", f"open={ok.url}", "--api-key-env", "SIM_KEY",
                          "--levels", "4,8", "--level-duration", "3", "--settle", "0", "--input-len", "64",
                          "--output-len", "16", env=env)
    assert p.returncode == 2, (p.stdout[-2000:], p.stderr[-2000:])
    assert "answered 401 Unauthorized: check --api-key-env (the key in $SIM_KEY was refused)" in p.stderr
    assert "Traceback" not in p.stderr and "wrong" not in p.stderr
    reqs = rows(out / "requests.csv")
    denied = [r for r in reqs if r["error"].startswith("HTTP 401")]
    assert 1 <= len(denied) <= 4  # before: thousands a second, for the whole ramp
    arm_denied = denied[0]["arm"]
    assert all(r["arm"] != arm_denied or r["level"] == "0" for r in reqs)  # nothing after level 0
    others = [r for r in reqs if r["arm"] != arm_denied]
    assert others and {r["level"] for r in others} == {"0", "1"}  # the other arm ramps on
    lv = [r for r in rows(out / "levels.csv") if r["arm"] == arm_denied]
    assert lv[0]["invalid_reason"].startswith(f"server at {sim.url} answered 401 Unauthorized")
    assert lv[1]["invalid_reason"].startswith("not sent: ")
    assert "mark: " in p.stdout and p.stdout.count("answered 401 Unauthorized") >= 1


# --------------------------------------------------------------------------------------------
# 3. A server that died: name it, exit 3


def test_server_that_dies_is_named_and_the_ramp_exits_3(tmp_path):
    with start_sim("--profile", "fp8-mtp", "--fault-crash-after", "20", speed=50) as sim:
        p, out = ramp_cli(tmp_path / "s", sim.url, "--levels", "4", "--level-duration", "150", "--settle", "0",
                          "--input-len", "64", "--output-len", "32")
    assert p.returncode == 3, (p.stdout[-2000:], p.stderr[-2000:])
    why = f"server at {sim.url} stopped answering: connection refused"
    assert why in p.stderr and "Traceback" not in p.stderr
    lv = rows(out / "levels.csv")[0]
    assert lv["valid"] == "0" and lv["invalid_reason"].startswith(why), lv["invalid_reason"]
    assert "client" not in lv["invalid_reason"]
    reqs = rows(out / "requests.csv")
    refused = [r for r in reqs if r["error"].startswith("ConnectError")]
    assert refused and len(refused) <= 4 * 10  # backed off, not a connect storm


def test_server_that_comes_back_is_not_gone(tmp_path):
    """The server dies during level 0 and is back (same port) for level 1: level 0 names it,
    level 1 does not, and no server is gone at the end (the CLI would exit 0)."""
    plan = RampPlan(levels=[2, 2], input_len=64, output_len=16, level_duration_s=100, settle_s=0)  # 2 s wall
    later = []
    with start_sim("--profile", "fp8-mtp", "--fault-crash-after", "10", speed=50) as first:
        arm = ArmSpec(name="sim", url=first.url)
        ramp = RampDriver([arm], plan)
        live = LiveSession([arm], interval=0.5, out_dir=tmp_path, ramp=ramp, isl=64, osl=16)

        def emit(e):
            if isinstance(e, LevelFinished) and e.level == 0:  # the ramp waits for its consumers
                first.proc.wait(10)
                later.append(start_sim("--profile", "fp8-mtp", "--startup-s", "0", speed=50, port=first.port))
                later[-1].__enter__()

        try:
            asyncio.run(live.run(emit, asyncio.Event()))
        finally:
            for s in later:
                s.__exit__(None, None, None)
    lv = rows(tmp_path / "levels.csv")
    assert lv[0]["invalid_reason"].startswith(f"server at {first.url} stopped answering: connection refused")
    assert "answer" not in (lv[1]["invalid_reason"] or "") and int(lv[1]["ok"]) > 0
    assert ramp.gone == {}


# --------------------------------------------------------------------------------------------
# 4. Rows reach requests.csv as requests finish


def test_rows_are_handed_over_as_requests_finish(tmp_path):
    """Each RequestFinished is emitted within moments of its request's end, not on a 1 s poll."""
    plan = RampPlan(levels=[4], input_len=64, output_len=64, level_duration_s=200, settle_s=0)  # 4 s wall
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=50) as sim:
        arm = ArmSpec(name="sim", url=sim.url)
        ramp = RampDriver([arm], plan)
        live = LiveSession([arm], interval=0.5, out_dir=tmp_path, ramp=ramp, isl=64, osl=64)
        lags = []

        def emit(e):
            if isinstance(e, RequestFinished) and e.record.t_end is not None:
                lags.append(time.time() - e.record.t_end)

        asyncio.run(live.run(emit, asyncio.Event()))
    lags.sort()
    assert len(lags) > 50
    # A 1 s poll gives a median near 0.5 s; the hand-over gives milliseconds (the tail is the
    # session loop busy with a scrape on a loaded box).
    assert lags[len(lags) // 2] < 0.2, lags[len(lags) // 2]
    assert lags[int(len(lags) * 0.9)] < 0.6, lags[int(len(lags) * 0.9)]


def test_kill_9_loses_at_most_the_requests_in_flight(tmp_path):
    import kill9_rows

    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=10) as sim:
        trials = kill9_rows.run_trials(sim.url, trials=5, max_wait_s=3.0, seed=7, levels="4,8", output_len=128,
                                       base=tmp_path, min_wait_s=0.7)
    for t in trials:
        assert t.sim_finished > 0 and t.c == 4
        assert 0 <= t.lost <= t.c, [(x.sim_finished, x.rows_ok, x.lost) for x in trials]

"""Fleets through a real Prometheus (Debian's `prometheus`): 3 simulated SGLang workers scraped
every second, one busy with this test's own /generate requests and two idle, each with its own
figures; a worker whose values stopped moving marked stale; Prometheus killed mid-session (the
fleet down with the query and the error, its workers kept) and back after a restart; a past
window rebuilt into a session folder; NaN and infinities as empty cells; the parsers fuzzed."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import http.server
import math
import subprocess
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Iterator, Optional

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.badserver import BadServer
from helpers.simproc import REPO, free_port, start_sim
from specmon.model import SAMPLE_COLUMNS, FleetChanged, Sample, SamplesTick
from specmon.session import codec
from specmon.session.live import LiveSession
from specmon.session.replay import ReplaySource
from specmon.sources.promfleet import (
    FleetQueries, FleetView, PrometheusFleet, PromQueryError, api_data, parse_duration, parse_matrix, parse_time,
    parse_vector, prom_float, read_results, selector_matchers, short_name, worker_sample,
)
from helpers.prometheus import PROMETHEUS, Prometheus
from helpers.sources_live import rows, ticks

needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: apt-get install -y prometheus)")
SAMPLE_BODY = (Path(__file__).resolve().parents[1] / "data" / "sglang-metrics-sample.prom").read_text()


# --------------------------------------------------------------------------------------------
# A real Prometheus in its own process group


class FrozenExporter:
    """An SGLang /metrics body whose samples carry the explicit timestamp of one moment and never
    move on: what a relay or federation that stopped updating shows Prometheus."""

    def __init__(self, body: str):
        stamp = int(time.time() * 1000)
        lines = [ln if not ln or ln.startswith("#") else f"{ln} {stamp}" for ln in body.splitlines()]
        payload = ("\n".join(lines) + "\n").encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the stdlib's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def generate_load(url: str, concurrency: int, seconds: float) -> int:
    """This test's own /generate requests to one worker; how many finished."""
    done = 0
    deadline = time.monotonic() + seconds

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            r = await client.post(url + "/generate", json={
                "input_ids": [11] * 512, "sampling_params": {"max_new_tokens": 96, "ignore_eos": True}})
            r.raise_for_status()
            done += 1

    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(one(client) for _ in range(concurrency)))
    return done


async def run_live(live: LiveSession, seconds: float, *others) -> list:
    events: list = []
    stop = asyncio.Event()

    async def stopper() -> None:
        await asyncio.sleep(seconds)
        stop.set()

    await asyncio.gather(live.run(events.append, stop), stopper(), *others)
    return events


def of(tick: SamplesTick, port: int) -> Optional[Sample]:
    return next((s for s in tick.samples if s.worker == f"127.0.0.1:{port}"), None)


def csv_rows(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


# --------------------------------------------------------------------------------------------
# The fleet: 3 simulated workers and a frozen one, one Prometheus for the module


class Fleet:
    def __init__(self, sims, dp, frozen: FrozenExporter, prom: Prometheus):
        self.sims, self.dp, self.frozen, self.prom = sims, dp, frozen, prom
        self.busy, self.idle = sims[0], sims[1:]
        self.all = 5  # every SGLang target: the 3 workers, the DP worker, the frozen one


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    if PROMETHEUS is None:
        pytest.skip("the prometheus binary is not installed (Debian: apt-get install -y prometheus)")
    with contextlib.ExitStack() as stack:
        sims = [stack.enter_context(start_sim("--enable-metrics", "--startup-s", "0.5", speed=1.0)) for _ in range(3)]
        dp = stack.enter_context(start_sim("--enable-metrics", "--startup-s", "0.5", "--dp-size", "2", speed=1.0))
        frozen = FrozenExporter(SAMPLE_BODY)
        stack.callback(frozen.close)
        prom = Prometheus({"sglang": [f"127.0.0.1:{s.port}" for s in sims], "dp": [f"127.0.0.1:{dp.port}"],
                           "relay": [f"127.0.0.1:{frozen.port}"]})
        stack.callback(prom.close)
        prom.start()
        prom.wait_for('count(up == 1)', lambda r: r and r[0]["value"][1] == "5")
        yield Fleet(sims, dp, frozen, prom)


@needs_prometheus
async def test_three_workers_one_busy_each_with_its_own_figures(fleet: Fleet, tmp_path: Path):
    source = PrometheusFleet(fleet.prom.url, '{job="sglang"}', interval_s=1.0)
    live = LiveSession([], interval=1.0, out_dir=tmp_path, fleets=[source])
    polls: list[int] = []

    async def count_queries() -> None:  # requests each poll made to Prometheus
        for _ in range(14):
            await asyncio.sleep(1.0)
            polls.append(source.queries)

    async def load() -> None:
        await asyncio.sleep(2.0)
        assert await generate_load(fleet.busy.url, 4, 10.0) > 4

    events = await run_live(live, 15.0, load(), count_queries())
    joined = [e for e in events if isinstance(e, FleetChanged)]
    assert len(joined) == 1 and sorted(a.url for a in joined[0].added) == sorted(s.url for s in fleet.sims)
    assert all(a.fleet == "prometheus" for a in joined[0].added)
    ts = ticks(events)
    status = ts[-1].fleets[0]
    assert status.up and status.kind == "prometheus" and status.scrape_interval_s == 1.0
    assert (status.healthy, status.total) == (3, 3)
    assert "knees need 1 s resolution" in (status.reason or "")
    # The busy worker, while the load ran: requests running, tokens flowing, TTFT percentiles known.
    busy = [of(t, fleet.busy.port) for t in ts[5:12]]
    assert all(s is not None and s.state == "up" and s.up for s in busy)
    assert max(s.running_reqs or 0 for s in busy) >= 1
    assert min(s.gen_tok_s or 0 for s in busy[2:]) > 0
    assert all(s.ttft_p50_s is not None and s.ttft_p99_s >= s.ttft_p50_s > 0 for s in busy[2:])
    assert all(s.queue_time_p50_s is not None and s.ttft_mean_s > 0 for s in busy[2:])
    assert busy[-1].kv_usage is not None and busy[-1].kv_capacity_tokens > 0
    assert busy[-1].requests_finished_total > busy[1].requests_finished_total
    assert all(s.stale_s is not None and 0 <= s.stale_s < 2.0 for s in busy)
    # The idle ones: a measured zero where a counter stood still, unknown (None) where an idle
    # histogram's quantile is NaN: never a made-up 0 TTFT.
    for sim in fleet.idle:
        idle = [of(t, sim.port) for t in ts[5:12]]
        assert all(s is not None and s.up for s in idle)
        assert all(s.running_reqs == 0 and s.queued_reqs == 0 and s.gen_tok_s == 0.0 for s in idle)
        assert all(s.ttft_p50_s is None and s.ttft_p99_s is None and s.queue_time_p50_s is None for s in idle)
        assert all(s.ttft_mean_s is None and s.cache_hit_rate is None for s in idle)
    # A handful of queries per poll for the whole fleet, not one per worker (the first poll and
    # the slow cadence also read the targets and look back for workers).
    steady = [q for q in polls if q]
    assert steady and min(steady) == 5 and max(steady) <= 7, polls
    header, rows = csv_rows(tmp_path / "samples.csv")
    assert header == SAMPLE_COLUMNS
    worker_rows = [r for r in rows if r["arm"]]
    assert worker_rows and all(r["worker"].startswith("127.0.0.1:") and r["source"] == "prometheus"
                               for r in worker_rows)
    idle_row = next(r for r in reversed(worker_rows) if r["worker"] == f"127.0.0.1:{fleet.idle[0].port}")
    assert idle_row["ttft_p50_s"] == "" and idle_row["gen_tok_s"] == "0"


@needs_prometheus
async def test_a_worker_whose_values_stopped_is_stale_never_live(fleet: Fleet):
    source = PrometheusFleet(fleet.prom.url, None, interval_s=1.0)  # every SGLang series
    try:
        deadline = time.monotonic() + 30
        while True:
            reading = await source.poll()
            frozen = reading.samples.get(f":{fleet.frozen.port}")
            if frozen is not None and frozen.state == "stale" or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
    finally:
        await source.aclose()
    assert reading.status.up and len(reading.workers) == fleet.all
    assert frozen is not None and frozen.state == "stale" and not frozen.up
    assert frozen.stale_s > 2.0 and "not live" in frozen.reason and "every 1 s" in frozen.reason
    assert frozen.running_reqs == 47  # its last figures are kept, said to be old
    fresh = [s for name, s in reading.samples.items() if name != f":{fleet.frozen.port}"]
    assert len(fresh) == fleet.all - 1 and all(s.state == "up" and s.stale_s < 2.0 for s in fresh)


@needs_prometheus
async def test_a_data_parallel_worker_has_a_reading_per_rank(fleet: Fleet):
    source = PrometheusFleet(fleet.prom.url, '{job="dp"}', interval_s=1.0)
    try:
        load = asyncio.create_task(generate_load(fleet.dp.url, 4, 6.0))
        await asyncio.sleep(4.0)
        reading = await source.poll()
        assert await load > 2
    finally:
        await source.aclose()
    [s] = reading.samples.values()
    assert s.up and s.worker == f"127.0.0.1:{fleet.dp.port}" and s.role == "regular"
    assert [r.dp_rank for r in s.ranks] == [0, 1]
    assert all(r.kv_capacity_tokens and r.running_reqs is not None for r in s.ranks)
    assert s.kv_capacity_tokens == sum(r.kv_capacity_tokens for r in s.ranks)  # one pool per rank
    assert s.running_reqs == sum(r.running_reqs for r in s.ranks) >= 1
    assert s.requests_finished_total >= 1 and s.gen_tok_s > 0


@needs_prometheus
async def test_history_window_into_a_session_folder(fleet: Fleet, tmp_path: Path):
    t0 = time.time()
    assert await generate_load(fleet.busy.url, 3, 6.0) > 2
    await asyncio.sleep(2.0)
    t1 = time.time()
    out = tmp_path / "history"
    cmd = [sys.executable, "-m", "specmon", "replay", "--prometheus", fleet.prom.url, "--selector", '{job="sglang"}',
           "--from", f"{t0 - 3:.3f}", "--to", f"{t1:.3f}", "--step", "1", "--out", str(out), "--headless"]
    p = subprocess.run(cmd, cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "3 worker(s)" in p.stderr and f"recorded in {out}" in p.stderr
    header, rows = csv_rows(out / "samples.csv")
    live_dir = tmp_path / "live"
    live = LiveSession([], interval=1.0, out_dir=live_dir,
                       fleets=[PrometheusFleet(fleet.prom.url, '{job="sglang"}', 1.0)])
    await run_live(live, 2.5)
    assert header == csv_rows(live_dir / "samples.csv")[0] == SAMPLE_COLUMNS  # the same columns as live
    worker_rows = [r for r in rows if r["arm"]]
    steps = sorted({r["ts"] for r in worker_rows})
    assert abs(len(steps) - (t1 - t0 + 3)) <= 1.5
    assert all(r["worker"] for r in worker_rows)
    assert {r["worker"] for r in worker_rows} == {f"127.0.0.1:{s.port}" for s in fleet.sims}
    busy = [r for r in worker_rows if r["worker"] == f"127.0.0.1:{fleet.busy.port}"]
    assert any(int(r["running_reqs"]) > 0 for r in busy)
    assert any(r["gen_tok_s"] and float(r["gen_tok_s"]) > 0 for r in busy)
    assert all(r["ttft_p50_s"] == "" for r in worker_rows if r["worker"] == f"127.0.0.1:{fleet.idle[0].port}")
    assert any(r["marker"].startswith("history from Prometheus") for r in rows)
    # Played back through the same source the TUI plays: the workers join, a tick per step.
    replay = ReplaySource(out, speed=1000)
    assert sum(isinstance(e, FleetChanged) for e in replay.events) == 1
    assert len([e for e in replay.events if isinstance(e, SamplesTick)]) == len(steps)
    # No ramp, no levels: the report has each worker's observed knee and curve only.
    r = subprocess.run([sys.executable, "-m", "specmon", "report", str(out), "--out", str(tmp_path / "report")],
                       cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "observed knees" in r.stdout and "operating curve" in r.stdout, r.stderr
    # A relative window works the same way (`--from -1h` is a value, not an option).
    p = subprocess.run([sys.executable, "-m", "specmon", "replay", "--prometheus", fleet.prom.url, "--from", "-5s",
                        "--out", str(tmp_path / "rel"), "--headless"], cwd=str(REPO),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and f"{fleet.all} worker(s)" in p.stderr, p.stderr


@needs_prometheus
def test_attach_command_says_what_it_found_and_refuses_a_selector_matching_nothing(fleet: Fleet, tmp_path: Path):
    def attach(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specmon", "attach", "--prometheus", *flags, "--headless",
                               "--duration", "3", "--out", str(tmp_path / "s")],
                              cwd=str(REPO), capture_output=True, text=True, timeout=120)

    ok = attach(fleet.prom.url, "--selector", '{job="sglang"}')
    assert ok.returncode == 0, ok.stderr
    assert "3 worker(s) through Prometheus" in ok.stderr and "scraped every 1 s" in ok.stderr
    assert "a ramp against a fleet worker scrapes that worker directly too" in ok.stderr
    assert f":{fleet.busy.port}: run " in ok.stdout
    nothing = attach(fleet.prom.url, "--selector", '{job="no-such-job"}')
    assert nothing.returncode == 2 and nothing.stderr.count("\n") == 1
    assert "matches no SGLang series" in nothing.stderr
    bad = attach(fleet.prom.url, "--selector", '{job=~"("}')
    assert bad.returncode == 2 and "Prometheus refused it" in bad.stderr and bad.stderr.count("\n") == 1
    gone = attach(f"http://127.0.0.1:{free_port()}")
    assert gone.returncode == 3 and "connection refused" in gone.stderr


# --------------------------------------------------------------------------------------------
# Prometheus down, slow, erring


@needs_prometheus
async def test_prometheus_killed_mid_session_then_back(tmp_path: Path):
    with start_sim("--enable-metrics", "--startup-s", "0.5", speed=1.0) as sim:
        prom = Prometheus({"sglang": [f"127.0.0.1:{sim.port}"]})
        try:
            prom.start()
            prom.wait_for('up{job="sglang"}', lambda r: r and r[0]["value"][1] == "1")
            source = PrometheusFleet(prom.url, None, interval_s=1.0)
            live = LiveSession([], interval=1.0, out_dir=tmp_path, fleets=[source])
            events: list = []
            stop = asyncio.Event()
            outage: dict[str, float] = {}

            async def chaos() -> None:
                await asyncio.sleep(4.0)
                prom.kill()
                outage["killed"] = time.time()
                await asyncio.sleep(6.0)
                outage["tries"] = source._failures  # polls that asked Prometheus and failed
                await asyncio.to_thread(prom.start)
                outage["back"] = time.time()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:  # until the fleet reads again, and two ticks more
                    t = ticks(events)[-1]
                    if t.ts > outage["back"] and t.fleets[0].up and t.samples[0].up:
                        break
                    await asyncio.sleep(0.5)
                await asyncio.sleep(2.0)
                # Then the worker itself goes: Prometheus cannot scrape it, and says why.
                await asyncio.to_thread(sim.stop)
                outage["worker_gone"] = time.time()
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and "refused" not in (ticks(events)[-1].samples[0].reason or ""):
                    await asyncio.sleep(0.5)
                stop.set()

            await asyncio.gather(live.run(events.append, stop), chaos())
        finally:
            prom.close()
    ts = ticks(events)
    arm = f":{sim.port}"
    before = [t for t in ts if t.ts < outage["killed"]]
    during = [t for t in ts if outage["killed"] + 1.5 < t.ts < outage["back"]]
    after = [t for t in ts if outage["back"] < t.ts < outage["worker_gone"]]
    gone = [t for t in ts if t.ts > outage["worker_gone"]]
    assert before and all(t.fleets[0].up for t in before[1:])
    assert during and not any(t.fleets[0].up for t in during)
    reasons = [t.fleets[0].reason for t in during]
    assert all("connection refused" in r and "query " in r and prom.url in r for r in reasons), reasons
    assert any("retrying in" in r for r in reasons)
    # the worker is kept through the outage, each tick saying why it has no reading
    assert all([s.arm for s in t.samples] == [arm] and not t.samples[0].up for t in during)
    assert all("no reading: Prometheus" in t.samples[0].reason for t in during)
    assert not [e for e in events if isinstance(e, FleetChanged) and e.removed]
    # back-off (1, 2, 4 s...): in the 6 s it was away at most 4 tries, where ticks came every second
    assert 2 <= outage["tries"] <= 4, outage
    assert any(f"retrying in {n} s" in r for r in reasons for n in (2, 4)), reasons
    assert source._failures == 0
    assert after and after[-1].fleets[0].up and after[-1].samples[0].state == "up"
    recovered = next(t.ts for t in after if t.fleets[0].up)
    assert recovered - outage["back"] < 12.0  # the back-off is bounded (8 s at a 1 s interval)
    # the worker down, the fleet up: its row says what Prometheus's scrape met (the target's lastError)
    last = gone[-1]
    assert last.fleets[0].up and last.samples[0].state == "down" and not last.samples[0].up
    assert "Prometheus cannot scrape it" in last.samples[0].reason and "refused" in last.samples[0].reason
    assert (last.fleets[0].healthy, last.fleets[0].total) == (0, 1)


async def test_prometheus_that_never_answers_or_errs_is_a_fleet_down_with_back_off():
    with BadServer() as srv:
        srv.faults["/api/v1/targets"] = "hang"
        source = PrometheusFleet(srv.url, None, interval_s=0.2, timeout_s=0.5)
        try:
            t0 = time.monotonic()
            first = await source.poll()
            assert time.monotonic() - t0 < 2.0  # bounded by the timeout, not by the server
            assert not first.status.up and "no complete answer within 0.5 s" in first.status.reason
            assert "query targets" in first.status.reason
            tries = []
            for _ in range(12):
                await asyncio.sleep(0.1)
                reading = await source.poll()
                tries.append(source._failures)
                assert not reading.status.up and "retrying" in reading.status.reason
            assert tries[-1] < 12  # polls during the back-off do not ask again
            srv.faults["/api/v1/targets"] = "status:503"
            await asyncio.sleep(source.retry_max_s)
            reading = await source.poll()
            assert not reading.status.up and "HTTP 503" in reading.status.reason
            srv.faults["/api/v1/targets"] = 'body:{"status":"success","data":{"activeTargets":[]}}'
            srv.faults["/api/v1/status/config"] = 'body:{"status":"success","data":{"yaml":"global: {scrape_interval: 5s}"}}'
            srv.faults["/api/v1/query"] = 'body:{"status":"error","errorType":"execution","error":"too many samples"}'
            await asyncio.sleep(source.retry_max_s)
            reading = await source.poll()
            assert not reading.status.up and "execution: too many samples" in reading.status.reason
            assert "query discover (group by" in reading.status.reason  # the query and the error
        finally:
            await source.aclose()


async def test_a_slow_prometheus_shows_the_last_answer_ageing_then_stale_then_down():
    """Prometheus answers once, then stops answering: the ticks never wait for it; they show the
    last answer with its age growing, stale past 2 scrape intervals, and the fleet down at the timeout."""
    import json

    t = time.time()
    worker = {"job": "j", "instance": "10.0.0.7:30000"}
    targets = {"status": "success", "data": {"activeTargets": [
        {"labels": worker, "scrapeUrl": "http://10.0.0.7:30000/metrics", "scrapeInterval": "1s", "health": "up"}]}}
    # every query gets this one answer: a running-requests gauge, and (read as `age`) a sample 0.2 s old
    answer = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {**worker, "__name__": "sglang:num_running_reqs"}, "value": [t, f"{t - 0.2:.3f}"]}]}}
    with BadServer() as srv:
        srv.faults["/api/v1/targets"] = "body:" + json.dumps(targets)
        srv.faults["/api/v1/query"] = "body:" + json.dumps(answer)
        source = PrometheusFleet(srv.url, None, interval_s=0.4, timeout_s=3.0)
        try:
            first = await source.poll()
            [s0] = first.samples.values()
            assert s0.up and s0.arm == "10.0.0.7:30000" and abs(s0.stale_s - 0.2) < 0.05
            srv.faults["/api/v1/query"] = "hang"
            seen = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < 6:
                w = time.monotonic()
                reading = await source.poll()
                assert time.monotonic() - w < 1.0  # a poll waits half a tick (0.2 s) at most, a busy host's lateness aside
                seen.append((time.monotonic() - t0, reading))
                if not reading.status.up:
                    break
                await asyncio.sleep(0.3)
        finally:
            await source.aclose()
    ups = [(dt, r.samples["10.0.0.7:30000"]) for dt, r in seen if r.status.up]
    ages = [x.stale_s for _, x in ups]
    assert ages == sorted(ages) and ages[-1] > 2.0  # the same answer, older and older
    assert ups[0][1].state == "up" and ups[-1][1].state == "stale" and "not live" in ups[-1][1].reason
    assert all(x.running_reqs == s0.running_reqs for _, x in ups)
    dt, last = seen[-1]
    assert not last.status.up and "no complete answer within 3 s" in last.status.reason and 2.5 < dt < 5.0


# --------------------------------------------------------------------------------------------
# NaN, infinities and missing histograms (the pure parsers)


def _answer(points: list[tuple[dict, str]], ts: float = 1000.0) -> bytes:
    import json

    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": m, "value": [ts, v]} for m, v in points]}}).encode()


def test_nan_and_infinities_are_unknown_never_zero():
    w = {"job": "j", "instance": "10.0.0.1:30000"}
    series = parse_vector(api_data(_answer([
        ({**w, "__name__": "sglang:num_running_reqs"}, "NaN"),
        ({**w, "__name__": "sglang_num_queue_reqs"}, "+Inf"),
        ({**w, "__name__": "sglang:token_usage"}, "-Inf"),
        ({**w, "__name__": "sglang:max_total_num_tokens"}, "1e400"),
        ({**w, "__name__": "sglang:num_used_tokens"}, "-5"),
        ({**w, "__name__": "sglang:spec_accept_length"}, "0"),
    ])))
    rates = parse_vector(api_data(_answer([({**w, "specmon": "gen_tok_s"}, "NaN"),
                                           ({**w, "specmon": "cache_hit_rate"}, "+Inf")])))
    latency = parse_vector(api_data(_answer([({**w, "specmon": "ttft_p50_s"}, "NaN")])))  # no observations
    age = parse_vector(api_data(_answer([(w, "999.5")])))
    workers, up = read_results({"series": series, "rates": rates, "latency": latency, "age": age})
    s = worker_sample("w", w["instance"], workers[("j", w["instance"], "")], None, 1000.0, 1.0)
    assert s.up and s.state == "up" and s.stale_s == 0.5
    for name in ("running_reqs", "queued_reqs", "kv_usage", "kv_capacity_tokens", "kv_used_tokens", "gen_tok_s",
                 "cache_hit_rate", "ttft_p50_s", "ttft_p99_s", "queue_time_p50_s", "accept_length"):
        assert getattr(s, name) is None, name
        assert codec.cell(getattr(s, name), name) == ""  # an empty cell in samples.csv
    assert s.spec_enabled is None  # an acceptance gauge of 0 says nothing about speculation
    # a worker without histograms at all: None, not an error
    bare = read_results({"series": parse_vector(api_data(_answer([({**w, "__name__": "sglang:num_running_reqs"}, "3")])))})
    s2 = worker_sample("w", w["instance"], bare[0][("j", w["instance"], "")], 1.0, 1000.0, 1.0)
    assert s2.running_reqs == 3 and s2.ttft_p50_s is None and s2.gen_tok_s is None
    assert prom_float("NaN") is None and prom_float("+Inf") is None and prom_float("2.5") == 2.5


def test_dp_ranks_become_rank_readings_and_a_down_target_says_why():
    w = {"job": "j", "instance": "sglang-0.sglang.ns.svc:30000"}
    pts = []
    for rank, (run, used) in enumerate([(5, 100), (1, 900)]):
        for name, v in (("num_running_reqs", run), ("num_used_tokens", used), ("max_total_num_tokens", 1000),
                        ("num_queue_reqs", 0), ("token_usage", used / 1000)):
            pts.append(({**w, "__name__": f"sglang:{name}", "dp_rank": str(rank), "engine_type": "decode"}, str(v)))
    workers, _ = read_results({"series": parse_vector(api_data(_answer(pts)))})
    s = worker_sample("w", w["instance"], workers[("j", w["instance"], "")], 1.0, 1000.0, 1.0)
    assert [r.dp_rank for r in s.ranks] == [0, 1] and [r.running_reqs for r in s.ranks] == [5, 1]
    assert s.running_reqs == 6 and s.kv_used_tokens == 1000 and s.kv_capacity_tokens == 2000 and s.kv_usage == 0.5
    assert s.role == "decode" and short_name(w["instance"]) == "sglang-0:30000"
    view = FleetView("prometheus", "http://p:9090")
    view.discovered = {("j", w["instance"], "")}
    down = view.read({"up": parse_vector(api_data(_answer([(w, "0")])))}, 1000.0)
    assert down.samples["sglang-0:30000"].state == "down" and "cannot scrape" in down.samples["sglang-0:30000"].reason
    gone = view.read({}, 1001.0)  # its target left Prometheus: the worker leaves the fleet
    assert gone.workers == [] and gone.status.reason == "the selector matches no SGLang series"


def test_queries_match_both_name_forms_and_keep_rank_zero():
    q = FleetQueries('job="sglang"', 15.0).poll({"sglang", 'we"ird.job'})
    assert all('__name__=~"sglang[:_](' in v for k, v in q.items() if k != "up")
    assert 'tp_rank=~"0|"' in q["series"] and 'job="sglang"' in q["series"]
    assert "[60s]" in q["rates"] and "[150s]" in q["latency"]  # 4 and 10 scrape intervals
    assert q["up"] == 'max by (job, instance) (up{job=~"sglang|we\\"ird\\\\.job"})'
    assert q["latency"].count("histogram_quantile(") == 4 and "sum by (le, job, instance, worker)" in q["latency"]


def test_times_durations_and_selectors():
    now = 1_800_000_000.0
    assert parse_time("-1h", now) == now - 3600 and parse_time("now-90s", now) == now - 90
    assert parse_time("-1h30m", now) == now - 5400 and parse_time("now", now) == now
    assert parse_time("1700000000.5", now) == 1700000000.5
    assert parse_time("2026-05-01T12:00:00Z", now) == parse_time("2026-05-01T14:00:00+02:00", now)
    for bad in ("", "yesterday", "-1x", "2026-05-01T12:00:00", "nan", "inf", "-"):
        with pytest.raises(ValueError):
            parse_time(bad, now)
    assert parse_duration("1m30s") == 90 and parse_duration("500ms") == 0.5 and parse_duration("1s2") is None
    assert selector_matchers('{job="a", x=~"b|c"}') == 'job="a", x=~"b|c"' and selector_matchers("{}") == ""
    for bad in ("job=a", '{job="a"', '{job="a}', 'up{job="a"}', '{a="}"}{'):
        with pytest.raises(ValueError):
            selector_matchers(bad)


# --------------------------------------------------------------------------------------------
# Fuzzing the parsers (a few seconds)

FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
JSON = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20)
VALUE = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "0", "-1", "1e308", "1e400", "3", "0.5", "2.5", "x", ""]),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-10, 10**20).map(str))
LABELS = st.fixed_dictionaries({
    "instance": st.sampled_from(["127.0.0.1:1", "h.example:2", "[::1]:3", "", "x"]),
}, optional={
    "job": st.sampled_from(["a", "b"]), "worker": st.sampled_from(["w1", ""]),
    "__name__": st.sampled_from([f"sglang{sep}{n}" for sep in ":_" for n in
                                 ("num_running_reqs", "token_usage", "max_total_num_tokens", "num_used_tokens",
                                  "spec_accept_length", "spec_accept_rate", "num_requests_total", "gen_throughput",
                                  "num_queue_reqs", "other")]),
    "dp_rank": st.sampled_from(["0", "1", "x", "-1"]), "engine_type": st.sampled_from(["unified", "prefill", "??"]),
    "specmon": st.sampled_from(["gen_tok_s", "cache_hit_rate", "ttft_p50_s", "ttft_p99_s", "itl_mean_s", "nope"]),
})
POINTS = st.lists(st.tuples(LABELS, st.floats(0, 2e9), VALUE), max_size=12)


@FUZZ
@given(st.one_of(st.binary(max_size=64), JSON.map(lambda o: __import__("json").dumps(o).encode())))
def test_fuzz_api_answers_raise_only_promqueryerror(body: bytes):
    try:
        data = api_data(body)
        parse_vector(data)
        parse_matrix(data)
    except PromQueryError:
        pass


@FUZZ
@given(st.dictionaries(st.sampled_from(["series", "age", "rates", "latency", "up"]), POINTS, max_size=5),
       st.floats(0, 2e9), st.sampled_from([None, 1.0, 15.0]))
def test_fuzz_readings_are_finite_or_unknown(raw, ts, interval):
    results = {q: [(labels, t, prom_float(v)) for labels, t, v in pts] for q, pts in raw.items()}
    view = FleetView("p", "http://p")
    view.config_interval_s = interval
    for _ in range(2):
        reading = view.read(results, ts)
        assert [w.name for w in reading.workers] == list(reading.samples)
        for s in reading.samples.values():
            for f in fields(Sample):
                v = getattr(s, f.name)
                if isinstance(v, float):
                    assert math.isfinite(v), f.name
                if f.name.endswith(("_reqs", "_tokens")) and v is not None:
                    assert isinstance(v, int) and v >= 0, f.name
            assert s.state in ("up", "down", "error", "stale") and (s.up == (s.state == "up"))
            for r in s.ranks or ():
                assert all(x is None or (isinstance(x, (int, float)) and x >= 0) for x in vars(r).values())


@FUZZ
@given(st.text(max_size=40))
def test_fuzz_text_inputs_raise_only_valueerror(text: str):
    for fn in (parse_time, selector_matchers):
        try:
            fn(text)
        except ValueError:
            pass
    assert parse_duration(text) is None or parse_duration(text) > 0
    assert isinstance(short_name(text), str)

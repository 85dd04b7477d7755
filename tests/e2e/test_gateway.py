"""specmon in front of the REAL SGLang Model Gateway (`smg` 1.x, the dev extra's) with
simulated SGLang workers behind it: discovery, one arm per worker, the gateway header figures, DP
ranks, workers added and removed while attached (FleetChanged and samples.csv rows), a listed
worker that cannot be reached, PD mode (prefill + decode), GET-only, and a URL that is neither.

The tests POST to the gateway (its worker add/remove API, generation requests) and to the
workers (load pinned to one DP rank); specmon itself only GETs, which the recording proxies and
the simulators' request logs check.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from helpers.gatewayproc import have_gateway, RecordingProxy, start_gateway
from helpers.simproc import REPO, free_port, start_sim
from helpers.records import rows as csv_rows
from specmon.analysis.ranks import rank_imbalance
from specmon.model import ArmSpec, FleetChanged, SamplesTick
from specmon.session.live import LiveSession
from specmon.sources.gateway import GatewayFleet, probe
from specmon.sources.sglang import ArmCollector
from helpers.gateway import SPEED, model_dir, post, regular

pytestmark = pytest.mark.skipif(not have_gateway(), reason="smg (pip install smg) is not installed")



def background(fn, *args) -> threading.Thread:
    """fn(*args) on a thread of its own: load kept in flight while a test reads the fleet. The
    servers stop under it at the test's end, which ends such a request with a connection error:
    that is its normal end here, not an unhandled exception."""
    def run() -> None:
        try:
            fn(*args)
        except OSError:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def wait_for(cond, timeout: float = 20.0, every: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"{what} not met within {timeout} s")


def poll(fleet: GatewayFleet):
    return asyncio.run(_poll_closed(fleet))


async def _poll_closed(fleet):
    try:
        return await fleet.poll()
    finally:
        await fleet.aclose()


# --------------------------------------------------------------------------------------------


def test_probe_tells_a_gateway_a_server_and_neither(regular):
    gw, a, b = regular["gw"], regular["a"], regular["b"]
    metrics_base = gw.metrics_url.rsplit("/", 1)[0]

    async def run():
        return [await probe(u) for u in (gw.url, a.url, b.url, metrics_base, f"http://127.0.0.1:{free_port()}")]

    kinds = [p.kind for p in asyncio.run(run())]
    # a plain SGLang server (the simulator, real SGLang alike) has no /workers: never a gateway
    assert kinds == ["gateway", "server", "server", "neither", "unreachable"]


def test_one_arm_per_worker_and_the_gateway_header(regular):
    gw, a, b = regular["gw"], regular["a"], regular["b"]
    # two routed requests, so the gateway has counted some and named its policy
    for _ in range(2):
        status, _ = post(gw.url + "/generate", {"text": "hello there", "sampling_params": {"max_new_tokens": 4}})
        assert status == 200
    fleet = GatewayFleet(gw.url, metrics_url=gw.metrics_url)

    async def two_polls():
        try:
            first = await fleet.poll()
            await asyncio.sleep(0.5)
            post_t = background(post, gw.url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})
            post_t.join(20)
            return first, await fleet.poll()
        finally:
            await fleet.aclose()

    first, second = asyncio.run(two_polls())
    st = second.status
    names = {w.name: w for w in second.workers}
    ha, hb = (urllib.parse.urlsplit(x.url) for x in (a, b))
    assert set(names) == {f"127.0.0.1:{ha.port}", f"127.0.0.1:{hb.port}"}
    assert {w.url for w in second.workers} == {a.url, b.url}
    assert all(w.fleet == fleet.name and w.role == "regular" for w in second.workers)
    assert second.scrape_workers is True
    assert st.up and st.kind == "gateway" and st.source == "workers"
    assert (st.healthy, st.total) == (2, 2)
    assert st.policy == "round_robin"
    assert st.routed_req_s is not None and st.routed_req_s > 0  # the request between the polls
    assert {w.circuit for w in st.workers} == {"closed"} and all(w.healthy for w in st.workers)
    assert all(w.active_requests == 0 for w in st.workers)  # nothing in flight now
    # smg 1.x merges worker b's dp_rank series with a's (sglang-router 0.3.2 answered 500 here:
    # tests/unit/test_gateway_fixtures.py); its reading of each worker is its smg_engine_* series once its
    # load monitor has read the worker (every second here), its /engine_metrics until then, and
    # both together (counters from /engine_metrics, the load over them) once both have answered
    assert st.reason is None
    for s in second.samples.values():
        assert s.up and s.source == "gateway" and s.reason in (
            "from the gateway's smg_engine_* series", "from the gateway's /engine_metrics",
            "load from the gateway's smg_engine_* series, counters from its /engine_metrics")
    b_name = f"127.0.0.1:{hb.port}"
    assert [r.dp_rank for r in second.samples[b_name].ranks] == [0, 1]


def test_dp_ranks_are_read_one_by_one_and_a_starving_rank_is_called_out(regular):
    b = regular["b"]
    # six long requests pinned to rank 1 (cap 4 a rank): rank 1 runs at its cap, rank 0 runs none
    threads = [background(post, b.url + "/generate", {"input_ids": list(range(100, 164)), "routed_dp_rank": 1,
                                                      "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}})
               for _ in range(6)]
    c = ArmCollector(ArmSpec(name="b", url=b.url))

    async def scrape():
        try:
            await c.refresh_info()
            for _ in range(60):
                s = await c.scrape()
                if s.ranks and s.ranks[1].running_reqs == 4:
                    return s
                await asyncio.sleep(0.2)
            return s
        finally:
            await c.aclose()

    s = asyncio.run(scrape())
    assert [r.dp_rank for r in s.ranks] == [0, 1]
    assert (s.ranks[0].running_reqs, s.ranks[1].running_reqs) == (0, 4)
    assert s.ranks[1].queued_reqs == 2 and s.queued_reqs == 2
    assert s.running_reqs == 4  # the worker's figure is the sum over its ranks, not rank 0's 0
    assert s.kv_capacity_tokens == s.ranks[0].kv_capacity_tokens + s.ranks[1].kv_capacity_tokens
    im = rank_imbalance(s.ranks, max_running=4)
    assert im.running_max_over_mean == pytest.approx(2.0)
    assert "dp1 saturated (running 4 at its cap 4) while dp0 is not" in im.callout and "dp0 starving" in im.callout
    # /v1/loads lists the same two ranks (the collector's path when /metrics is off)
    with urllib.request.urlopen(b.url + "/v1/loads", timeout=5) as r:
        loads = json.loads(r.read())
    assert [e["dp_rank"] for e in loads["loads"]] == [0, 1] and loads["loads"][1]["num_running_reqs"] == 4
    for t in threads:
        t.join(0)  # they end with the module's sims


def test_workers_join_and_leave_while_attached(regular, tmp_path):
    gw, a, c = regular["gw"], regular["a"], regular["c"]
    events: list = []
    fleet = GatewayFleet(gw.url, metrics_url=gw.metrics_url)
    live = LiveSession([], interval=0.5, out_dir=tmp_path / "s", mode="attach", fleets=[fleet], nvml=None)
    name_a = f"127.0.0.1:{urllib.parse.urlsplit(a.url).port}"
    name_c = f"127.0.0.1:{urllib.parse.urlsplit(c.url).port}"

    async def run():
        stop = asyncio.Event()
        task = asyncio.create_task(live.run(events.append, stop))

        async def until(cond, what, timeout=30.0):
            deadline = time.monotonic() + timeout
            while not cond():
                assert time.monotonic() < deadline, what
                await asyncio.sleep(0.1)

        try:
            await until(lambda: any(isinstance(e, FleetChanged) for e in events), "first FleetChanged")
            status, body = await asyncio.to_thread(post, gw.url + "/workers", {"url": c.url})
            assert status in (200, 201, 202), body
            await until(lambda: any(isinstance(e, FleetChanged) and any(w.name == name_c for w in e.added)
                                    for e in events), "worker c joined")
            await until(lambda: any(isinstance(e, SamplesTick) and any(s.arm == name_c and s.up for s in e.samples)
                                    for e in events), "a sample of worker c")
            wid = next(w["id"] for w in gw.workers() if w["url"] == a.url)
            assert await asyncio.to_thread(gw.delete, "/workers/" + urllib.parse.quote(wid, safe="")) in (200, 202, 204)
            await until(lambda: any(isinstance(e, FleetChanged) and name_a in e.removed for e in events),
                        "worker a left")
            await asyncio.sleep(1.2)  # two more ticks without it
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)

    asyncio.run(run())
    rows = csv_rows(tmp_path / "s" / "samples.csv")
    notes = [r["marker"] for r in rows if r["marker"]]
    assert any("joined" in n and name_c in n for n in notes) and any("left" in n and name_a in n for n in notes)
    left_at = float(next(r["ts"] for r in rows if r["marker"] and "left" in r["marker"] and name_a in r["marker"]))
    c_rows = [r for r in rows if r["arm"] == name_c]
    assert c_rows and all(r["worker"] == c.url and r["role"] == "regular" for r in c_rows)
    assert not [r for r in rows if r["arm"] == name_a and float(r["ts"]) > left_at]  # its rows stop
    assert [r for r in rows if r["arm"] == name_a and float(r["ts"]) < left_at]  # and the old ones stay
    meta = json.loads((tmp_path / "s" / "session.json").read_text())
    assert {name_a, name_c} <= {arm["name"] for arm in meta["arms"]}
    # put the registry back for the other tests
    post(gw.url + "/workers", {"url": a.url})
    gw.wait_workers(3)
    wid = next(w["id"] for w in gw.workers() if w["url"] == c.url)
    gw.delete("/workers/" + urllib.parse.quote(wid, safe=""))
    gw.wait_workers(2)


def test_attach_to_the_gateway_is_get_only_and_records_per_worker_rows(regular, tmp_path):
    gw, a, b, logs = regular["gw"], regular["a"], regular["b"], regular["logs"]
    front, mfront = RecordingProxy(gw.url), RecordingProxy(gw.metrics_url.rsplit("/", 1)[0])
    seen = {p: len((logs / f"{p}.log").read_text().splitlines()) for p in ("a", "b")}
    try:
        p = subprocess.run([sys.executable, "-m", "specmon", "attach", front.url, "--headless", "--duration", "4",
                            "--interval", "0.5", "--gateway-metrics", mfront.url, "--out", str(tmp_path / "s")],
                           cwd=str(REPO), capture_output=True, text=True, timeout=90)
    finally:
        front.close()
        mfront.close()
    assert p.returncode == 0, p.stderr
    assert "is a gateway: watching the workers it lists" in p.stderr
    assert front.methods() == {"GET"} and mfront.methods() == {"GET"}
    paths = {path.split("?")[0] for _, path in front.requests}
    assert {"/workers", "/readiness", "/get_loads"} <= paths
    # every worker answered specmon itself: the gateway's merge of their /metrics was never needed
    assert "/engine_metrics" not in paths
    # what the workers got meanwhile (specmon's scrapes and the gateway's checks): GETs, and the
    # gateway's gRPC probe (HTTP/2 preface "PRI *"), nothing that changes a thing
    for w in ("a", "b"):
        new = (logs / f"{w}.log").read_text().splitlines()[seen[w]:]
        assert new and {line.split()[0] for line in new} <= {"GET", "PRI"}, new[:20]
        assert any(line.split()[1] == "/metrics" for line in new)
    rows = csv_rows(tmp_path / "s" / "samples.csv")
    name_b = f"127.0.0.1:{urllib.parse.urlsplit(b.url).port}"
    b_rows = [r for r in rows if r["arm"] == name_b]
    assert {r["dp_rank"] for r in b_rows} == {"", "0", "1"}  # the worker's row and one per rank
    assert all(r["worker"] == b.url and r["role"] == "regular" for r in b_rows)
    events = [json.loads(x) for x in (tmp_path / "s" / "events.jsonl").read_text().splitlines()]
    fleets = [f for e in events if e.get("type") == "SamplesTick" for f in e.get("fleets", [])]
    assert fleets and fleets[-1]["kind"] == "gateway" and fleets[-1]["total"] == 2


def test_a_listed_worker_that_cannot_be_reached_stays_shown(regular, model_dir, tmp_path):
    gw = regular["gw"]
    with start_sim("--enable-metrics", "--model-path", model_dir, speed=SPEED) as d:
        status, body = post(gw.url + "/workers", {"url": d.url})
        assert status in (200, 201, 202), body
        gw.wait_workers(3)
    # d is gone (its process stopped) and still listed by the gateway
    name_d = f"127.0.0.1:{urllib.parse.urlsplit(d.url).port}"
    front = RecordingProxy(gw.url)  # what the fleet asks the gateway for
    fleet = GatewayFleet(front.url, metrics_url=gw.metrics_url)
    events: list = []
    live = LiveSession([], interval=0.5, out_dir=tmp_path / "s", mode="attach", fleets=[fleet], nvml=None)

    async def run():
        stop = asyncio.Event()
        task = asyncio.create_task(live.run(events.append, stop))
        await asyncio.sleep(4.0)
        stop.set()
        await asyncio.wait_for(task, 30)

    try:
        asyncio.run(run())
    finally:
        front.close()
    # a worker specmon cannot reach: its figures are asked of the gateway (its smg_engine_* series
    # while it still counts as healthy, else its merge of the workers' /metrics)
    assert d.url in (fleet.needs_figures or set())
    ticks = [e for e in events if isinstance(e, SamplesTick)]
    last = ticks[-1]
    d_sample = next(s for s in last.samples if s.arm == name_d)
    assert not d_sample.up and d_sample.state in ("refused", "down") and d_sample.worker == d.url
    st = last.fleets[0]
    d_status = next(w for w in st.workers if w.arm == name_d)
    assert st.total == 3 and d_status.url == d.url
    wait_for(lambda: next(w for w in gw.workers() if w["url"] == d.url)["is_healthy"] is False, 20,
             what="the gateway marks d unhealthy")
    reading = poll(GatewayFleet(gw.url, metrics_url=gw.metrics_url))
    d_status = next(w for w in reading.status.workers if w.arm == name_d)
    assert d_status.healthy is False and reading.status.healthy == 2 and reading.status.total == 3
    assert not reading.samples[name_d].up  # the gateway got no load from it either
    wid = next(w["id"] for w in gw.workers() if w["url"] == d.url)
    gw.delete("/workers/" + urllib.parse.quote(wid, safe=""))
    gw.wait_workers(2, healthy=False)


def test_pd_mode_prefill_and_decode(model_dir, tmp_path):
    boot = free_port()
    with start_sim("--enable-metrics", "--model-path", model_dir, "--disaggregation-mode", "prefill",
                   "--disaggregation-bootstrap-port", str(boot), speed=SPEED) as pre, \
         start_sim("--enable-metrics", "--model-path", model_dir, "--disaggregation-mode", "decode",
                   speed=SPEED) as dec:
        with start_gateway("--pd-disaggregation", "--prefill", pre.url, str(boot), "--decode", dec.url,
                           workers=2) as gw, \
             start_gateway("--pd-disaggregation", "--prefill", pre.url, str(free_port()), "--decode", dec.url,
                           workers=2) as wrong:
            status, body = post(gw.url + "/generate", {"text": "the prefill computes, the decode answers",
                                                        "sampling_params": {"max_new_tokens": 6}})
            assert status == 200 and json.loads(body)["meta_info"]["completion_tokens"] == 6
            # a gateway that hands out the wrong bootstrap port: the decode cannot reach the prefill
            status, body = post(wrong.url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})
            assert status >= 500 and b"bootstrap" in body
            reading = poll(GatewayFleet(gw.url, metrics_url=gw.metrics_url))
            # the PD gateway's own timing (smg_pd_*), for the fleet's header line
            st = reading.status
            assert st.pd_ttft_s is not None and st.pd_prefill_s is not None
            assert 0 < st.pd_prefill_s <= st.pd_ttft_s < 30
            roles = {w.url: w.role for w in reading.workers}
            assert roles == {pre.url: "prefill", dec.url: "decode"}
            assert (reading.status.healthy, reading.status.total) == (2, 2)
            assert {w.role for w in reading.status.workers} == {"prefill", "decode"}
            p = subprocess.run([sys.executable, "-m", "specmon", "attach", gw.url, "--headless", "--duration", "2.5",
                                "--interval", "0.5", "--out", str(tmp_path / "s")],
                               cwd=str(REPO), capture_output=True, text=True, timeout=90)
            assert p.returncode == 0, p.stderr
    rows = csv_rows(tmp_path / "s" / "samples.csv")
    by_role = {r["role"] for r in rows if r["arm"]}
    assert by_role == {"prefill", "decode"}
    # the PD roles are in the workers' own series too
    assert any(r["role"] == "decode" and r["up"] == "1" for r in rows)


def test_a_url_that_is_neither_is_one_line_and_exit_2(regular, tmp_path):
    metrics_base = regular["gw"].metrics_url.rsplit("/", 1)[0]  # answers every path with its metrics
    p = subprocess.run([sys.executable, "-m", "specmon", "attach", metrics_base, "--headless", "--duration", "2",
                        "--out", str(tmp_path / "s")], cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "neither an SGLang server nor a gateway" in lines[0]
    # --no-discover: the old behaviour, the URL is one server (it never answers as one: exit 3)
    p = subprocess.run([sys.executable, "-m", "specmon", "attach", metrics_base, "--no-discover", "--headless",
                        "--duration", "2", "--interval", "0.5", "--out", str(tmp_path / "t")],
                       cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr


def test_many_workers_from_one_sim_process_behind_the_gateway(model_dir, tmp_path):
    n = 12
    base = free_port()
    while any(not _port_free(base + i) for i in range(n)):
        base = free_port()
    with start_sim("--enable-metrics", "--model-path", model_dir, "--workers", str(n), port=base, speed=SPEED,
                   timeout=60) as sim:
        urls = [f"http://127.0.0.1:{base + i}" for i in range(n)]
        with start_gateway("--worker-urls", *urls, workers=n, timeout=60) as gw:
            fleet = GatewayFleet(gw.url, metrics_url=gw.metrics_url)
            events: list = []
            live = LiveSession([], interval=1.0, out_dir=tmp_path / "s", mode="attach", fleets=[fleet], nvml=None)

            async def run():
                stop = asyncio.Event()
                task = asyncio.create_task(live.run(events.append, stop))
                await asyncio.sleep(10.0)
                stop.set()
                await asyncio.wait_for(task, 30)

            t0 = time.process_time()
            asyncio.run(run())
            cpu = time.process_time() - t0
    ticks = [e for e in events if isinstance(e, SamplesTick)]
    last = ticks[-1]
    assert len(last.samples) == n and all(s.up for s in last.samples)
    assert last.fleets[0].total == n and last.fleets[0].healthy == n
    assert len({s.worker for s in last.samples}) == n
    # after the first reading of every worker (/server_info x 12) the ticks come about every second
    gaps = [b.ts - a.ts for a, b in zip(ticks, ticks[1:])]
    print(f"{n} workers: {len(ticks)} ticks in 10 s, gaps {[round(g, 2) for g in gaps]}, specmon CPU {cpu:.2f} s")
    assert len(ticks) >= 5 and sorted(gaps)[len(gaps) // 2] < 2.0  # 2 cores shared with 12 sims and the gateway
    assert cpu < 10.0  # one poll of 12 workers and 12 direct scrapes a second: under a core


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_workers_scraped_in_turn_show_their_age_and_a_stopped_one_is_down_at_once(model_dir, tmp_path, monkeypatch):
    """More workers than FLEET_EVERY_TICK: a few are scraped each tick, oldest first, the others'
    rows repeat their newest scrape with its age (stale_s); a worker that stops closes its kept
    connection, so it is scraped on the next tick and shows down, not its old figures."""
    from specmon.session import live as live_mod

    monkeypatch.setattr(live_mod, "FLEET_EVERY_TICK", 1)
    monkeypatch.setattr(live_mod, "FLEET_SCRAPE_EVERY_S", 2.0)  # 4 workers, 0.5 s ticks: one a tick
    with start_sim("--enable-metrics", "--model-path", model_dir, speed=SPEED) as a, \
         start_sim("--enable-metrics", "--model-path", model_dir, speed=SPEED) as b, \
         start_sim("--enable-metrics", "--model-path", model_dir, speed=SPEED) as c, \
         start_sim("--enable-metrics", "--model-path", model_dir, speed=SPEED) as d:
        with start_gateway("--worker-urls", a.url, b.url, c.url, d.url, workers=4) as gw:
            fleet = GatewayFleet(gw.url, metrics_url=gw.metrics_url)
            events: list = []
            live = LiveSession([], interval=0.5, out_dir=tmp_path / "s", mode="attach", fleets=[fleet], nvml=None)
            stopped_at: list[float] = []

            async def run():
                stop = asyncio.Event()
                task = asyncio.create_task(live.run(events.append, stop))
                await asyncio.sleep(8.0)
                stopped_at.append(time.time())
                await asyncio.to_thread(d.stop)  # SIGTERM: it closes its connections as it exits
                stopped_at.append(time.time())
                await asyncio.sleep(3.0)
                stop.set()
                await asyncio.wait_for(task, 30)

            asyncio.run(run())
    name_d = f"127.0.0.1:{d.port}"
    rows = [r for r in csv_rows(tmp_path / "s" / "samples.csv") if r["arm"] and not r["dp_rank"]]
    settled = [r for r in rows if 3.0 < float(r["ts"]) - float(rows[0]["ts"]) and float(r["ts"]) < stopped_at[0]]
    assert {r["arm"] for r in settled} == {f"127.0.0.1:{s.port}" for s in (a, b, c, d)}
    fresh = [r for r in settled if not r["stale_s"]]
    aged = [r for r in settled if r["stale_s"]]
    # about one scrape a tick of four rows, every worker's turn coming within 2 s (and two ticks'
    # slack: a busy host runs a tick late now and then)
    assert aged and fresh and len(aged) > 2 * len(fresh), (len(aged), len(fresh))
    assert all(r["state"] == "up" for r in settled)
    assert max(float(r["stale_s"]) for r in aged) <= 2.0 + 1.2
    for arm in {r["arm"] for r in settled}:
        assert any(not r["stale_s"] for r in settled if r["arm"] == arm), arm
    after = [r for r in rows if r["arm"] == name_d and float(r["ts"]) > stopped_at[0]]
    first_down = next(float(r["ts"]) for r in after if r["state"] != "up")
    assert first_down - stopped_at[1] <= 2.5, (first_down - stopped_at[1], [(r["ts"], r["state"]) for r in after])
    assert all(r["state"] != "up" for r in after if float(r["ts"]) >= first_down)


def test_an_admin_key_gateway_read_with_gateway_key_env_and_worker_figures_from_one_metrics_scrape(
        model_dir, tmp_path, monkeypatch):
    """smg 1.x with control-plane keys: /workers and /get_loads want the admin key. Without
    --gateway-key-env attach says so in one line (exit 2); with it the fleet reads the gateway,
    the key never lands in a file. For workers specmon cannot reach, running/waiting/KV usage per
    DP rank come from the smg_engine_* series of the metrics scrape, /engine_metrics not asked."""
    key = "k3y-" + "9f2c41e7d0b8a6"
    with start_sim("--enable-metrics", "--model-path", model_dir, speed=5) as a, \
         start_sim("--enable-metrics", "--model-path", model_dir, "--dp-size", "2", speed=5) as b:
        with start_gateway("--worker-urls", a.url, b.url, "--policy", "round_robin", workers=2, admin_key=key) as gw:
            base = [sys.executable, "-m", "specmon", "attach", gw.url, "--headless", "--duration", "2",
                    "--interval", "0.5"]
            env = {k: v for k, v in __import__("os").environ.items() if k != "SPECMON_TEST_GW_KEY"}
            p = subprocess.run(base + ["--out", str(tmp_path / "nokey")], cwd=str(REPO), capture_output=True,
                               text=True, timeout=60, env=env)
            assert p.returncode == 2 and "admin key" in p.stderr and "--gateway-key-env" in p.stderr, p.stderr
            assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
            p = subprocess.run(base + ["--gateway-key-env", "SPECMON_TEST_GW_KEY"], cwd=str(REPO),
                               capture_output=True, text=True, timeout=60, env=env)
            assert p.returncode == 2 and "SPECMON_TEST_GW_KEY" in p.stderr and "not set" in p.stderr, p.stderr

            for _ in range(6):  # requests in flight on both workers
                background(post, gw.url + "/generate", {"text": "keep going",
                                                        "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}})
            monkeypatch.setenv("SPECMON_TEST_GW_KEY", key)
            front = RecordingProxy(gw.url)
            fleet = GatewayFleet(front.url, metrics_url=gw.metrics_url, admin_key_env="SPECMON_TEST_GW_KEY")
            fleet.need_figures_of({a.url, b.url})  # as LiveSession says when neither answers specmon

            async def polls():
                try:
                    out = []
                    for _ in range(3):
                        out.append(await fleet.poll())
                        await asyncio.sleep(1.2)  # the gateway's load monitor polls every second here
                    return out
                finally:
                    await fleet.aclose()

            first_n = 0
            readings = asyncio.run(polls())
            front.close()
            assert all(r.status.up for r in readings), readings[-1].status.reason
            paths = [path for _, path in front.requests]
            first_n = paths.index("/workers", 1)  # where the second poll begins
            assert "/engine_metrics" not in paths[first_n:]  # the metrics scrape covered both workers
            last = readings[-1]
            nb = f"127.0.0.1:{urllib.parse.urlsplit(b.url).port}"
            sb = last.samples[nb]
            assert sb.reason == "from the gateway's smg_engine_* series" and sb.up
            assert [r.dp_rank for r in sb.ranks] == [0, 1]
            assert sb.running_reqs == sum(r.running_reqs for r in sb.ranks)
            # /get_loads (with the key) adds the token counts the series leave out
            assert all(r.kv_capacity_tokens and r.kv_capacity_tokens > 0 for r in sb.ranks)
            assert sum((s.running_reqs or 0) for s in last.samples.values()) > 0  # requests were in flight

            out = tmp_path / "withkey"
            p = subprocess.run(base + ["--gateway-key-env", "SPECMON_TEST_GW_KEY", "--out", str(out)],
                               cwd=str(REPO), capture_output=True, text=True, timeout=90,
                               env=dict(env, SPECMON_TEST_GW_KEY=key))
            assert p.returncode == 0, p.stderr
            assert key not in p.stdout + p.stderr
            for f in out.rglob("*"):
                if f.is_file():
                    assert key.encode() not in f.read_bytes(), f
            rows = csv_rows(out / "samples.csv")
            assert {r["arm"] for r in rows if r["arm"]} >= {nb}


def test_the_tests_gateway_dies_with_the_process_that_started_it(tmp_path):
    """gatewayproc's router is in a session of its own (its group is what a test stops): a test
    process killed with -9 takes it down all the same (the parent-death signal)."""
    import psutil

    script = tmp_path / "hold.py"
    script.write_text("import sys, time\nsys.path.insert(0, sys.argv[1])\nfrom helpers.gatewayproc import start_gateway\n"
                      "with start_gateway() as gw:\n    print(gw.proc.pid, flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, str(script), str(REPO / "tests")], cwd=str(REPO),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        router = psutil.Process(int(holder.stdout.readline()))
        assert router.is_running() and router.status() != psutil.STATUS_ZOMBIE
        assert os.getsid(router.pid) == router.pid != os.getsid(holder.pid)
    finally:
        holder.kill()
        holder.wait(10)
    wait_for(lambda: not router.is_running() or router.status() == psutil.STATUS_ZOMBIE, 10,
             what="the router gone after kill -9 of the process that started it")

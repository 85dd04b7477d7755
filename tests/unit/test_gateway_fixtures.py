"""What specmon reads from each gateway release, over pages recorded from the real gateways
(tests/helpers/record_gateway.py): sglang-router 0.3.2 (the last of that package) and smg 1.13.0. Each
recording holds two workers behind a regular gateway (one with 2 DP ranks) and a PD pair, with
requests in flight. Fast tier: files only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmon.sources.gateway import (
    engine_sample, parse_gateway_metrics, parse_loads, parse_readiness, parse_registry,
)

DATA = Path(__file__).resolve().parents[1] / "data"
VERSIONS = {"gateway-0.3.2": "sgl-model-gateway 0.3.2", "gateway-smg-1.13": "smg 1.13.0"}


def load(folder: str, setup: str):
    d = DATA / folder / setup
    meta = json.loads((d / "meta.json").read_text())
    return d, meta


@pytest.mark.parametrize("folder", VERSIONS)
@pytest.mark.parametrize("setup", ["regular", "pd"])
def test_the_registry_names_every_worker_with_its_role_and_dp_size(folder, setup):
    d, meta = load(folder, setup)
    assert meta["version"] == VERSIONS[folder]
    reg = parse_registry(json.loads((d / "workers.json").read_text()))
    assert reg is not None
    assert {w.url: w.role for w in reg} == {u: w["role"] for u, w in meta["workers"].items()}
    assert {w.url: w.dp_size for w in reg} == {u: w["dp_size"] for u, w in meta["workers"].items()}
    assert all(w.healthy is True for w in reg)
    r = parse_readiness(200, json.loads((d / "readiness.json").read_text()))
    assert (r.ready, r.healthy, r.total) == (True, 2, 2)


def test_sglang_router_0_3_2_loads_are_one_token_figure_per_worker():
    d, meta = load("gateway-0.3.2", "regular")
    loads = parse_loads(json.loads((d / "get_loads.json").read_text()))
    assert set(loads) == set(meta["workers"])
    # requests were in flight: the gateway's token load of every worker is above zero
    assert all(w.load and w.load > 0 and not w.ranks for w in loads.values())
    # its /engine_metrics could not merge a DP worker's series with a plain worker's
    assert meta["status"]["/engine_metrics"] == 500
    assert b"Label names should agree" in (d / "engine_metrics.prom").read_bytes()


def test_smg_1_13_loads_are_per_worker_and_dp_rank():
    d, meta = load("gateway-smg-1.13", "regular")
    raw = json.loads((d / "get_loads.json").read_text())
    loads = parse_loads(raw)
    assert set(loads) == set(meta["workers"])
    for url, w in meta["workers"].items():
        ranks = loads[url].ranks
        assert [r.dp_rank for r in ranks] == list(range(w["dp_size"]))
        assert all(r.kv_capacity_tokens and r.kv_capacity_tokens > 0 for r in ranks)
    # the figures are the file's, rank by rank (requests were in flight: some are above zero)
    for e in raw["loads"]:
        r = next(x for x in loads[e["worker"]].ranks if x.dp_rank == e["dp_rank"])
        assert (r.running_reqs, r.queued_reqs, r.kv_used_tokens) == (
            e["num_running_reqs"], e["num_waiting_reqs"], e["num_used_tokens"])
    assert sum(r.running_reqs for w in loads.values() for r in w.ranks) > 0
    # its worker routes want the admin key; readiness, metrics and the engine metrics do not
    assert meta["status_without_admin_key"]["/workers"] == 401
    assert meta["status_without_admin_key"]["/get_loads"] == 401
    assert meta["status_without_admin_key"]["/readiness"] == 200


@pytest.mark.parametrize("folder", VERSIONS)
def test_the_gateway_header_series_read_in_both_releases(folder):
    d, meta = load(folder, "regular")
    gm = parse_gateway_metrics((d / "prometheus.prom").read_text())
    assert gm.is_gateway and gm.routed_total and gm.routed_total > 0
    assert gm.workers == set(meta["workers"])
    assert gm.health == {u: True for u in meta["workers"]}
    assert gm.circuit == {u: "closed" for u in meta["workers"]}
    assert gm.policies == ["round_robin"]


def test_smg_1_13_reexports_every_workers_load_per_dp_rank():
    d, meta = load("gateway-smg-1.13", "regular")
    text = (d / "prometheus.prom").read_text()
    gm = parse_gateway_metrics(text)
    assert set(gm.engine) == set(meta["workers"])
    running = 0.0
    for url, w in meta["workers"].items():
        assert sorted(gm.engine[url]) == list(range(w["dp_size"]))
        for rank, v in gm.engine[url].items():
            assert set(v) == {"running", "waiting", "token_usage", "gen_tok_s"}
            line = next(x for x in text.splitlines() if x.startswith("smg_engine_running_requests{")
                        and f'worker="{url}"' in x and f'dp_rank="{rank}"' in x)
            assert v["running"] == float(line.rsplit(" ", 1)[1])
            running += v["running"]
    assert running > 0  # requests were in flight when it was recorded
    # a worker's Sample from them: one rank a row, summed over the DP worker's two
    reg = {w.url: w for w in parse_registry(json.loads((d / "workers.json").read_text()))}
    dp = next(u for u, w in meta["workers"].items() if w["dp_size"] == 2)
    s = engine_sample("b", reg[dp], gm.engine[dp], 1.0)
    assert [r.dp_rank for r in s.ranks] == [0, 1]
    assert s.running_reqs == sum(int(v["running"]) for v in gm.engine[dp].values())
    assert s.kv_usage is not None and s.kv_usage > 0
    assert s.source == "gateway" and "smg_engine" in s.reason


def test_smg_1_13_pd_timing_sums_and_counts():
    d, _ = load("gateway-smg-1.13", "pd")
    text = (d / "prometheus.prom").read_text()
    gm = parse_gateway_metrics(text)
    for key, name in (("ttft", "smg_pd_ttft_seconds"), ("prefill", "smg_pd_prefill_duration_seconds")):
        total, n = gm.pd[key]
        want_sum = sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(name + "_sum{"))
        want_n = sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(name + "_count{"))
        assert (total, n) == (want_sum, want_n) and n > 0
    # the 0.3.2 gateway has no PD timing of its own
    assert parse_gateway_metrics((DATA / "gateway-0.3.2" / "pd" / "prometheus.prom").read_text()).pd == {}


async def test_the_fleet_header_shows_the_pd_timing_of_the_recorded_pd_gateway():
    """The PD view's hook: a poll's smg_pd_* means, on the fleet's header line."""
    from textual.app import App

    from specmon.model import FleetStatus
    from specmon.sources.gateway import GatewayFleet
    from specmon.tui.state import SessionState
    from specmon.tui.widgets.fleet import FleetHeader

    gm = parse_gateway_metrics((DATA / "gateway-smg-1.13" / "pd" / "prometheus.prom").read_text())
    fleet = GatewayFleet("http://127.0.0.1:9")  # never polled: its window arithmetic only
    pd = dict(fleet._pd_window(gm.pd))
    ttft, prefill = gm.pd["ttft"], gm.pd["prefill"]
    assert pd["ttft"] == ttft[0] / ttft[1] and pd["prefill"] == prefill[0] / prefill[1]
    # two more requests, 1.0 s and 0.2 s more: the next window's mean is theirs alone
    later = {"ttft": (ttft[0] + 1.0, ttft[1] + 2), "prefill": (prefill[0] + 0.2, prefill[1] + 2)}
    assert fleet._pd_window(later) == pytest.approx({"ttft": 0.5, "prefill": 0.1})
    assert fleet._pd_window(later) == pytest.approx({"ttft": 0.5, "prefill": 0.1})  # no request since: kept

    class One(App):
        def compose(self):
            yield FleetHeader(SessionState(), id="h")

    status = FleetStatus(name="gateway pd", kind="gateway", url="u", up=True, pd_ttft_s=pd["ttft"],
                         pd_prefill_s=pd["prefill"])
    async with One().run_test() as pilot:
        line = pilot.app.query_one("#h", FleetHeader).line(status).plain
    assert f"PD TTFT {pd['ttft'] * 1e3:,.0f} ms (prefill {pd['prefill'] * 1e3:,.0f} ms)" in line
    assert "PD TTFT 915 ms (prefill 7 ms)" in line  # the recording's own sums and counts, as docs/gateway.md says

"""The gateway's answers parsed without HTTP: shapes taken from the real smg 0.3.2 (tests/
test_gateway.py checks them live), newer gateways' per-rank /get_loads details, and hypothesis
fuzzing of every parse function (odd JSON, odd exposition text): plain values out, never an
exception (split_engine_metrics: MetricsParseError, a ValueError, and nothing else)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.sources.gateway import (
    base_url, parse_gateway_metrics, parse_loads, parse_readiness, parse_registry, split_engine_metrics, worker_name,
)
from specmon.sources.prom import MetricsParseError, MetricsSnapshot
from specmon.sources.serverinfo import parse_loads_ranks
from specmon.sources.sglang import ranks_from_metrics

# As smg 0.3.2 answers GET /workers in PD mode (ids shortened).
REGISTRY = {"workers": [
    {"id": "0f76", "url": "http://127.0.0.1:31004", "model_id": "/m", "priority": 50, "cost": 1.0,
     "worker_type": "decode", "is_healthy": True, "load": 0, "connection_mode": "HTTP",
     "metadata": {"dp_size": "1", "disaggregation_mode": "null"}, "disable_health_check": False},
    {"id": "e86e", "url": "http://127.0.0.1:31003", "model_id": "/m", "priority": 50, "cost": 1.0,
     "worker_type": "prefill", "is_healthy": False, "load": 3, "connection_mode": "HTTP", "bootstrap_port": 31013,
     "metadata": {"dp_size": "1"}, "disable_health_check": False}],
    "total": 2, "stats": {"prefill_count": 1, "decode_count": 1, "regular_count": 0}}

GATEWAY_METRICS = """# TYPE smg_router_requests_total counter
smg_router_requests_total{router_type="http",backend_type="sglang",connection_mode="http",model="/m",endpoint="generate",streaming="false"} 7
smg_router_requests_total{router_type="http",backend_type="sglang",connection_mode="http",model="/m",endpoint="chat",streaming="true"} 3
# TYPE smg_worker_cb_state gauge
smg_worker_cb_state{worker="http://127.0.0.1:31001"} 0
smg_worker_cb_state{worker="http://127.0.0.1:31002"} 1
smg_worker_cb_state{worker="http://127.0.0.1:31009"} -1
smg_worker_health{worker="http://127.0.0.1:31001"} 1
smg_worker_health{worker="http://127.0.0.1:31002"} 0
smg_worker_health{worker="http://127.0.0.1:31009"} -1
smg_worker_requests_active{worker="http://127.0.0.1:31001"} 5
smg_worker_selection_total{worker_type="regular",connection_mode="http",model="/m",policy="cache_aware"} 10
"""


def test_registry_roles_health_and_bootstrap_port():
    ws = parse_registry(REGISTRY)
    assert [(w.url, w.role, w.healthy, w.load, w.bootstrap_port) for w in ws] == [
        ("http://127.0.0.1:31004", "decode", True, 0, None), ("http://127.0.0.1:31003", "prefill", False, 3, 31013)]
    assert [worker_name(w.url) for w in ws] == ["127.0.0.1:31004", "127.0.0.1:31003"]
    # a plain SGLang server's 404 body, a list, a registry of nothing
    assert parse_registry({"detail": "Not Found"}) is None and parse_registry([]) is None
    assert parse_registry({"workers": [], "total": 0}) == []


def test_dp_aware_entries_fold_into_one_worker():
    d = {"workers": [{"url": "http://h:1@0", "worker_type": "regular", "is_healthy": True, "load": 2},
                     {"url": "http://h:1@1", "worker_type": "regular", "is_healthy": False, "load": 5}]}
    (w,) = parse_registry(d)
    assert (w.url, w.healthy, w.load, w.entries) == ("http://h:1", False, 7, ["http://h:1@0", "http://h:1@1"])
    assert base_url("grpc://h:1") is None and base_url("http://u:p@h:1") is None


def test_readiness_answers():
    assert parse_readiness(200, {"status": "ready", "healthy_workers": 2, "total_workers": 3}).__dict__ == {
        "ready": True, "healthy": 2, "total": 3, "reason": None}
    r = parse_readiness(503, {"status": "not ready", "reason": "insufficient healthy workers"})
    assert (r.ready, r.healthy, r.reason) == (False, None, "insufficient healthy workers")
    assert parse_readiness(None, None).ready is None and "404" in parse_readiness(404, None).reason


def test_loads_old_and_new_shapes():
    old = parse_loads({"workers": [{"worker": "http://h:1", "load": 1200}, {"worker": "http://h:2", "load": -1}]})
    assert old["http://h:1"].load == 1200 and not old["http://h:1"].ranks and old["http://h:2"].load is None
    new = parse_loads({"workers": [{"worker": "http://h:3", "load": 30, "details": {"dp_rank_count": 2, "loads": [
        {"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0, "num_used_tokens": 0,
         "max_total_num_tokens": 1000, "token_usage": 0.0, "gen_throughput": 0.0},
        {"dp_rank": 1, "num_running_reqs": 4, "num_waiting_reqs": 2, "num_used_tokens": 30,
         "max_total_num_tokens": 1000, "token_usage": 0.03, "gen_throughput": 120.5}]}}]})
    ranks = new["http://h:3"].ranks
    assert [(r.dp_rank, r.running_reqs, r.queued_reqs, r.kv_usage) for r in ranks] == [(0, 0, 0, 0.0), (1, 4, 2, 0.03)]
    assert new["http://h:3"].gen_tok_s_gauge == pytest.approx(120.5)


def test_gateway_metrics_header_figures():
    m = parse_gateway_metrics(GATEWAY_METRICS)
    assert m.is_gateway and m.routed_total == 10
    assert m.circuit == {"http://127.0.0.1:31001": "closed", "http://127.0.0.1:31002": "open"}  # -1: removed
    assert m.health == {"http://127.0.0.1:31001": True, "http://127.0.0.1:31002": False}
    assert m.workers == {"http://127.0.0.1:31001", "http://127.0.0.1:31002"}
    assert m.active == {"http://127.0.0.1:31001": 5} and m.policies == ["cache_aware"]
    # readable, nothing routed yet: the counter does not exist, 0 requests were routed
    assert parse_gateway_metrics("smg_worker_pool_size{worker_type=\"regular\"} 2\n").routed_total == 0.0
    assert parse_gateway_metrics("sglang:num_running_reqs 3\n").is_gateway is False


def test_engine_metrics_split_per_worker_and_dp_ranks():
    text = "\n".join([
        'sglang_num_running_reqs{dp_rank="0",engine_type="unified",tp_rank="0",worker_addr="http://h:1"} 0',
        'sglang_num_running_reqs{dp_rank="1",engine_type="unified",tp_rank="0",worker_addr="http://h:1"} 4',
        'sglang_token_usage{dp_rank="0",tp_rank="0",worker_addr="http://h:1"} 0.1',
        'sglang_token_usage{dp_rank="1",tp_rank="0",worker_addr="http://h:1"} 0.97',
        'sglang_num_running_reqs{engine_type="unified",tp_rank="0",worker_addr="http://h:2"} 7', ""])
    per = split_engine_metrics(text)
    assert set(per) == {"http://h:1", "http://h:2"}
    assert per["http://h:2"].value("num_running_reqs") == 7
    ranks = ranks_from_metrics(per["http://h:1"])
    assert [(r.dp_rank, r.running_reqs, r.kv_usage) for r in ranks] == [(0, 0, 0.1), (1, 4, 0.97)]
    assert ranks_from_metrics(per["http://h:2"]) == []
    # only the workers the session cannot reach itself: h:1's lines are never parsed (h:10 is not h:1)
    text += 'sglang_num_running_reqs{engine_type="unified",tp_rank="0",worker_addr="http://h:10/"} 3\n'
    only = split_engine_metrics(text, only={"http://h:1"})
    assert set(only) == {"http://h:1"} and only["http://h:1"].dp_total("num_running_reqs") == 4
    assert set(split_engine_metrics(text, only={"http://h:10", "http://h:2"})) == {"http://h:10", "http://h:2"}
    assert split_engine_metrics(text, only=set()) == {}


# --------------------------------------------------------------------------------------------
# Fuzzing

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12) | st.sampled_from(["http://h:1", "http://h:1@2", "grpc://h:2", "http://[::1]:3", "prefill",
                                               "decode", "-1", "1e3"]),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["workers", "url", "worker", "worker_type", "is_healthy", "load", "details", "loads",
                         "dp_rank", "num_running_reqs", "num_used_tokens", "max_total_num_tokens", "token_usage",
                         "metadata", "dp_size", "bootstrap_port", "healthy_workers", "total_workers", "reason",
                         "gen_throughput", "num_waiting_reqs", "x"]), kids, max_size=6),
    max_leaves=30)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(d=JSON, status=st.sampled_from([None, 200, 404, 500, 503]))
def test_json_parsers_take_any_value(d, status):
    for w in parse_registry(d) or []:
        assert w.url.startswith("http") and isinstance(w.role, str)
    parse_readiness(status, d)
    for url, load in parse_loads(d).items():
        assert load.load is None or load.load >= 0
    for r in parse_loads_ranks(d):
        assert r.dp_rank >= 0
    json.dumps(str(d))


LINES = st.lists(st.one_of(
    st.sampled_from(["smg_worker_cb_state", "smg_worker_health", "smg_worker_requests_active",
                     "smg_router_requests_total", "smg_worker_selection_total", "sglang_num_running_reqs",
                     "sglang:token_usage"]).flatmap(
        lambda n: st.tuples(st.just(n), st.dictionaries(
            st.sampled_from(["worker", "worker_addr", "dp_rank", "policy", "tp_rank", "le"]),
            st.sampled_from(["http://h:1", "http://h:2@1", "0", "1", "x", "", 'a"b', "+Inf"]), max_size=3),
            st.sampled_from(["0", "1", "-1", "2", "NaN", "+Inf", "1e308", "x", "3.5"]))).map(
        lambda t: t[0] + ("{" + ",".join(f'{k}="{v}"' for k, v in t[1].items()) + "}" if t[1] else "") + " " + t[2]),
    st.text(max_size=40)), max_size=12)


@FUZZ
@given(lines=LINES)
def test_exposition_parsers_take_any_text(lines):
    text = "\n".join(lines) + "\n"
    m = parse_gateway_metrics(text)
    assert all(v in ("closed", "open", "half_open") for v in m.circuit.values())
    assert m.routed_total is None or m.routed_total >= 0
    try:
        per = split_engine_metrics(text)
    except MetricsParseError:
        return
    for snap in per.values():
        assert isinstance(snap, MetricsSnapshot)
        for r in ranks_from_metrics(snap):
            assert r.kv_usage is None or r.kv_usage >= 0


@FUZZ
@given(lines=LINES)
def test_plain_gateway_lines_read_as_the_parser_reads_them(lines):
    """parse_gateway_metrics reads plain lines the fast way (prom.plain_sample), the rest with
    prometheus_client's parser: a plain line reads the same either way."""
    from specmon.sources.prom import MetricsParseError, plain_sample, slow_series

    for line in lines:
        plain = plain_sample(line)
        if plain is None or not line.startswith("smg_"):
            continue
        try:
            (name, [(labels, value)]), = slow_series(line + "\n").items()
        except MetricsParseError:
            raise AssertionError(f"the parser refused a plain line: {line!r}")
        assert (plain[0], plain[1]) == (name, labels), line
        assert plain[2] == value or (plain[2] != plain[2] and value != value), line


@FUZZ
@given(lines=LINES)
def test_a_line_reads_the_same_before_and_after_the_gateway_is_known(lines):
    """Past the first readable smg_ line, parse_gateway_metrics skips by name the series it does
    not read: each line, read first (nothing skipped) or after a gateway line (names checked),
    gives the same figures."""
    for line in lines:
        alone = parse_gateway_metrics(line + "\n")
        after = parse_gateway_metrics("smg_worker_pool_size 2\n" + line + "\n")
        assert (after.active, after.health, after.circuit, after.policies, after.workers) == \
            (alone.active, alone.health, alone.circuit, alone.policies, alone.workers), line
        if alone.is_gateway:
            assert after.routed_total == alone.routed_total, line


def test_a_registry_that_reads_as_before_is_not_parsed_again_and_a_changed_one_is():
    """GatewayFleet keeps the workers read from the last /workers body: the same body again
    gives the same workers, a changed body (a worker unhealthy, one gone) is read afresh.
    Against a real HTTP server on 127.0.0.1 answering the gateway's GETs."""
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from specmon.sources.gateway import GatewayFleet

    answers = {"/workers": REGISTRY, "/readiness": {"status": "ready", "healthy_workers": 1, "total_workers": 2},
               "/get_loads": {"workers": []}}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path not in answers:
                self.send_error(404)
                return
            body = json.dumps(answers[self.path]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fleet = GatewayFleet(f"http://127.0.0.1:{server.server_address[1]}", discover_metrics=False)

        async def polls():
            try:
                first = await fleet.poll()
                kept = fleet._registry_read[1]
                second = await fleet.poll()
                assert fleet._registry_read[1] is kept  # the same body: not parsed again
                changed = json.loads(json.dumps(REGISTRY))
                changed["workers"][0]["is_healthy"] = False
                del changed["workers"][1]
                answers["/workers"] = changed
                third = await fleet.poll()
                return first, second, third
            finally:
                await fleet.aclose()

        first, second, third = asyncio.run(polls())
    finally:
        server.shutdown()
        server.server_close()
    assert first.status == second.status and [w.url for w in first.workers] == [w.url for w in second.workers]
    assert [(w.url, w.healthy) for w in first.status.workers] == [
        ("http://127.0.0.1:31004", True), ("http://127.0.0.1:31003", False)]
    assert [(w.url, w.healthy) for w in third.status.workers] == [("http://127.0.0.1:31004", False)]

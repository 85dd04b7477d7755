"""Attach-side faults against a real (bad) HTTP server on 127.0.0.1: every fault becomes a
Sample with a state and a reason, never an exception, and the scrape after the fault clears
reads the server again. Also: the retry back-off after thousands of failures, odd numbers in
/metrics and in the JSON endpoints, and env proxies kept away from loopback scrapes."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import psutil
import pytest

from helpers.badserver import SERVER_INFO, BadServer, proxy_catcher
from helpers.simproc import free_port
from specmon import clock
from specmon.model import ArmSpec, Sample
from specmon.sources.sglang import METRICS_MAX_BYTES, ArmCollector

SAMPLE_RUNNING = 47  # sglang:num_running_reqs in tests/data/sglang-metrics-sample.prom
LOADS_RUNNING = 5  # badserver.LOADS


def collector(url: str, **kw) -> ArmCollector:
    opts = dict(timeout_s=0.5, deadline_s=2.0, retry_min_s=0.0, retry_max_s=0.0, info_retry_s=0.0)
    opts.update(kw)
    return ArmCollector(ArmSpec("bad", url), **opts)


async def scrape(c: ArmCollector, limit_s: float = 15.0) -> Sample:
    """One scrape; a scrape that does not return in `limit_s` fails the test (it would hang the session)."""
    return await asyncio.wait_for(c.scrape(), limit_s)


class RssWatch:
    """Peak RSS growth of this process while the block runs, sampled every 10 ms. Past
    `kill_above` bytes it resets the bad server's connections so a runaway read stops."""

    def __init__(self, srv: BadServer, kill_above: int = 768 * 2**20):
        self.srv, self.kill_above = srv, kill_above
        self.proc = psutil.Process()
        self.base = self.peak = self.proc.memory_info().rss
        self.killed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = self.proc.memory_info().rss
            self.peak = max(self.peak, rss)
            if rss - self.base > self.kill_above and not self.killed:
                self.killed = True
                self.srv.kill_connections()
            time.sleep(0.01)

    @property
    def growth(self) -> int:
        return self.peak - self.base

    def __enter__(self) -> "RssWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def odd_info(**changes) -> str:
    d = json.loads(json.dumps(SERVER_INFO))
    d.update(changes)
    return "body:" + json.dumps(d)


# name: (faults by path, default fault, expected state, words the reason holds)
CASES = {
    "endless /metrics": ({"/metrics": "endless", "/v1/loads": "status:404"}, None, "error",
                         f"/metrics body over {METRICS_MAX_BYTES // 2**20} MiB"),
    "endless /metrics, /v1/loads answers": ({"/metrics": "endless"}, None, "up", "/metrics body over 32 MiB"),
    "gzip bomb /metrics": ({"/metrics": "gzip-bomb", "/v1/loads": "status:404"}, None, "error",
                           "/metrics body over 32 MiB"),
    "endless /server_info": ({"/server_info": "endless"}, None, "up", "/server_info body over 4 MiB"),
    "trickling /metrics": ({"/metrics": "trickle"}, None, "timeout", "no complete answer from {url} within 2 s"),
    "/metrics never answers": ({"/metrics": "hang"}, None, "timeout", "within"),
    "malformed /metrics": ({"/metrics": 'body:sglang:num_running_reqs{tp_rank="0" 47\n', "/v1/loads": "status:404"},
                           None, "error", "malformed /metrics"),
    "/metrics without SGLang series": ({"/metrics": "body:up 1\n", "/v1/loads": "status:404"}, None, "error",
                                       "/metrics has no SGLang series"),
    "/metrics 500": ({"/metrics": "status:500", "/v1/loads": "status:404"}, None, "error",
                     "/metrics answered HTTP 500"),
    "/metrics 500, /v1/loads 500": ({"/metrics": "status:500", "/v1/loads": "status:500"}, None, "error",
                                    "/v1/loads answered HTTP 500"),
    "401 everywhere": ({}, "status:401", "unauthorized", "401"),
    "reset on /metrics": ({"/metrics": "reset"}, None, "down", "/metrics"),
    "reset inside the /metrics body": ({"/metrics": "reset-body"}, None, "down", "/metrics"),
    "/server_info closes without a word": ({"/server_info": "close"}, None, "down", "/server_info"),
    "/server_info is a JSON list": ({"/server_info": "body:[1, 2]"}, None, "up", "/server_info is not a JSON object"),
    "/server_info is null": ({"/server_info": "body:null"}, None, "up", "/server_info is not a JSON object"),
    "/server_info is not JSON": ({"/server_info": "body:{"}, None, "up", "/server_info is not JSON"),
    "/server_info nested too deep": ({"/server_info": "body:" + "[" * 100_000}, None, "up",
                                     "/server_info is not JSON"),
    "/server_info internal_states is a dict": ({"/server_info": odd_info(internal_states={"0": {}})}, None, "up", None),
    "/server_info memory_usage is a list": (
        {"/server_info": odd_info(internal_states=[{"memory_usage": [1, 2]}], max_total_num_tokens="x")},
        None, "up", None),
    "/v1/loads is a list": ({"/metrics": "status:404", "/v1/loads": "body:[{}]"}, None, "error",
                            "/v1/loads has no load entry"),
    "/v1/loads is null": ({"/metrics": "status:404", "/v1/loads": "body:null"}, None, "error",
                          "/v1/loads has no load entry"),
    "/v1/loads loads is a dict": ({"/metrics": "status:404", "/v1/loads": 'body:{"loads": {"0": {}}}'}, None,
                                  "error", "/v1/loads has no load entry"),
    "/v1/loads odd values": ({"/metrics": "status:404", "/v1/loads":
                              'body:{"loads": [{"num_running_reqs": Infinity, "num_waiting_reqs": -3, '
                              '"num_used_tokens": 1e400, "max_total_num_tokens": "lots", "token_usage": NaN, '
                              '"speculative": [3.0]}]}'}, None, "up", None),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_fault_matrix(case):
    faults, default, state, words = CASES[case]
    with BadServer() as srv:
        c = collector(srv.url)
        try:
            srv.faults.update(faults)
            srv.default_fault = default
            if "gzip-bomb" in faults.values():
                srv.bomb()  # compressed before the clock starts
            with RssWatch(srv) as rss:
                t0 = time.monotonic()
                s = await scrape(c)
                took = time.monotonic() - t0
            assert s.state == state, (s.state, s.reason)
            assert s.up == (state == "up")
            if words:
                assert s.reason and words.format(url=srv.url) in s.reason, s.reason
            else:
                assert s.reason is None, s.reason
            # Bounded: within the deadline (plus slack for a busy machine), and memory.
            assert took < c.deadline_s + 3.0
            assert not rss.killed and rss.growth < 256 * 2**20, rss.growth
            if case == "/server_info internal_states is a dict":
                assert c.info.model == "bad/model" and c.info.kv_capacity_tokens == 617344
                assert c.info.max_running_requests is None  # no per-DP cap to read
            if case == "/server_info memory_usage is a list":
                assert c.info.kv_capacity_tokens is None and c.info.weight_gb is None
            if case == "/v1/loads odd values":
                assert s.source == "loads"
                assert (s.running_reqs, s.queued_reqs, s.kv_used_tokens, s.kv_usage) == (None, None, None, None)
                assert s.kv_capacity_tokens == 617344  # from /server_info, the loads value being odd

            # The fault clears: the next scrape reads the server again.
            srv.faults.clear()
            srv.default_fault = None
            s = await scrape(c)
            assert s.up and s.state == "up" and s.reason is None, (s.state, s.reason)
            assert s.running_reqs == (SAMPLE_RUNNING if s.source == "metrics" else LOADS_RUNNING)
            assert c.info is not None and c.info.model == "bad/model"
        finally:
            await c.aclose()


async def test_endless_metrics_memory_stays_bounded_with_the_default_cap():
    with BadServer() as srv:
        srv.faults.update({"/metrics": "endless", "/v1/loads": "status:404"})
        c = ArmCollector(ArmSpec("bad", srv.url), timeout_s=5.0, retry_min_s=0.0, retry_max_s=0.0)
        try:
            with RssWatch(srv) as rss:
                for _ in range(3):
                    s = await scrape(c)
                    assert s.state == "error" and "/metrics body over 32 MiB" in s.reason, s.reason
            # The body is kept only up to the cap (plus one chunk); nothing accumulates across scrapes.
            assert not rss.killed and rss.growth < 3 * METRICS_MAX_BYTES, rss.growth
        finally:
            await c.aclose()


async def test_trickling_body_gives_up_at_the_deadline_and_says_so():
    with BadServer() as srv:
        srv.faults["/metrics"] = "trickle"
        c = collector(srv.url, timeout_s=0.3, deadline_s=1.0)
        try:
            t0 = time.monotonic()
            s = await scrape(c, limit_s=10.0)
            took = time.monotonic() - t0
            assert s.state == "timeout" and f"no complete answer from {srv.url} within 1 s" in s.reason, s.reason
            assert 0.9 <= took < 4.0 and s.scrape_s is not None and s.scrape_s >= 0.9
            assert c.scrape_started is None  # no scrape running any more
        finally:
            await c.aclose()


async def test_backoff_delay_doubles_to_its_ceiling():
    port = free_port()
    c = ArmCollector(ArmSpec("gone", f"http://127.0.0.1:{port}"), retry_min_s=0.01, retry_max_s=0.04)
    try:
        # each delay lies between the retry time less the clock after the scrape and less the
        # clock before it (the collector's clock: a scrape on a busy host takes a while)
        shortest, longest = [], []
        for _ in range(5):
            before = clock.wall()
            s = await c.scrape()
            after = clock.wall()
            assert s.state == "refused"
            shortest.append(c._retry_at - after)
            longest.append(c._retry_at - before)
            await asyncio.sleep(max(0.0, c._retry_at - clock.wall()) + 0.002)
        assert shortest[0] <= 0.01 and 0.012 < longest[1] and shortest[1] <= 0.02, (shortest, longest)
        assert all(0.025 < b and a <= 0.04 for a, b in zip(shortest[2:], longest[2:])), (shortest, longest)
    finally:
        await c.aclose()


ODD_GAUGES = """\
sglang:num_running_reqs{model_name="m",tp_rank="0"} +Inf
sglang:num_queue_reqs{model_name="m",tp_rank="0"} NaN
sglang:num_used_tokens{model_name="m",tp_rank="0"} -5.0
sglang:max_total_num_tokens{model_name="m",tp_rank="0"} 1e400
sglang:token_usage{model_name="m",tp_rank="0"} -0.5
sglang:gen_throughput{model_name="m",tp_rank="0"} -Inf
sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.5
sglang:spec_accept_rate{model_name="m",tp_rank="0"} NaN
sglang:num_requests_total{model_name="m"} 1e400
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1.0
sglang:time_to_first_token_seconds_bucket{le="abc",model_name="m"} 2.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 3.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 1.0
sglang:time_to_first_token_seconds_count{model_name="m"} 3.0
sglang:queue_time_seconds_bucket{le="0.1",model_name="m"} NaN
sglang:queue_time_seconds_bucket{le="+Inf",model_name="m"} 3.0
sglang:queue_time_seconds_sum{model_name="m"} +Inf
sglang:queue_time_seconds_count{model_name="m"} 3.0
"""


async def test_odd_numbers_in_metrics_read_as_unknown():
    with BadServer() as srv:
        srv.server_info = {**SERVER_INFO, "speculative_algorithm": "EAGLE", "max_total_num_tokens": None,
                           "internal_states": []}
        srv.faults["/metrics"] = "body:" + ODD_GAUGES
        c = collector(srv.url)
        try:
            for _ in range(2):  # the second scrape has a window: percentiles are computed from it
                s = await scrape(c)
                await asyncio.sleep(0.01)
            assert s.up and s.state == "up" and s.source == "metrics", (s.state, s.reason)
            # Not a crash, and not a made-up 0: unknown.
            assert (s.running_reqs, s.queued_reqs, s.kv_used_tokens, s.kv_capacity_tokens) == (None,) * 4
            assert (s.kv_usage, s.gen_tok_s_gauge, s.accept_rate, s.requests_finished_total) == (None,) * 4
            assert s.accept_length == 2.5  # the one sane value is kept
            assert s.ttft_p50_s is None and s.ttft_mean_s is None  # le="abc": not a histogram
            assert s.queue_time_p50_s is None and s.queue_time_mean_s is None
        finally:
            await c.aclose()


async def test_an_unforeseen_exception_is_the_arms_error_not_a_raise():
    # Port 99999 is no port: the connect raises an exception group holding an OverflowError,
    # which no transport handler expects.
    c = collector("http://127.0.0.1:99999")
    try:
        s = await scrape(c)
        assert not s.up and s.state == "error", (s.state, s.reason)
        assert "scrape failed: OverflowError" in s.reason and "port must be 0-65535" in s.reason, s.reason
    finally:
        await c.aclose()


async def test_non_ascii_key_is_an_error_that_does_not_show_the_key(monkeypatch):
    monkeypatch.setenv("SPECMON_ODD_KEY", "sk-clé-secrète")
    with BadServer() as srv:
        c = ArmCollector(ArmSpec("bad", srv.url, api_key_env="SPECMON_ODD_KEY"), retry_min_s=0.0, retry_max_s=0.0)
        try:
            s = await scrape(c)
            assert s.state == "error" and "$SPECMON_ODD_KEY" in s.reason and "non-ASCII" in s.reason, s.reason
            assert "secr" not in s.reason
        finally:
            await c.aclose()


PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def catcher(monkeypatch):
    with proxy_catcher() as p:
        for var in PROXY_VARS:
            monkeypatch.setenv(var, p.url)
        for var in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(var, raising=False)
        yield p


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_env_proxy_never_sees_a_loopback_scrape(catcher, monkeypatch, host):
    monkeypatch.setenv("SPECMON_PROXY_KEY", "sk-proxy-test")
    with BadServer() as srv:
        c = ArmCollector(ArmSpec("local", f"http://{host}:{srv.port}", api_key_env="SPECMON_PROXY_KEY"))
        try:
            s = await scrape(c)
            assert s.up and s.state == "up" and s.running_reqs == SAMPLE_RUNNING, (s.state, s.reason)
        finally:
            await c.aclose()
        assert "GET /metrics" in srv.requests
    assert catcher.requests == []


async def test_env_proxy_still_carries_other_hosts(catcher):
    # .invalid never resolves: the request can only reach the proxy, which is on 127.0.0.1.
    c = collector("http://specmon-test.invalid:30000")
    try:
        s = await scrape(c)
        assert not s.up and s.state == "error" and "HTTP 502" in s.reason, (s.state, s.reason)
    finally:
        await c.aclose()
    assert "GET http://specmon-test.invalid:30000/server_info" in catcher.requests


async def test_unusable_env_proxy_is_a_sample_not_a_crash(monkeypatch):
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ALL_PROXY", "ftp://127.0.0.1:9")  # a scheme httpx cannot proxy through
    c = collector("http://specmon-test.invalid:30000")
    try:
        s = await scrape(c)
        assert s.state == "error" and "proxy or certificate settings" in s.reason and "ftp" in s.reason, s.reason
    finally:
        await c.aclose()
    with BadServer() as srv:  # a loopback arm does not read them, so it is not hurt
        c = collector(srv.url)
        try:
            assert (await scrape(c)).state == "up"
        finally:
            await c.aclose()


@pytest.mark.parametrize("usage, used, cap, expected", [
    ("55.0", "1000", "10000", 0.1),  # 5,500 %: the server's gauge is wrong, used / capacity is not
    ("1e308", None, None, None),  # nothing sane to fall back on: unknown
    ("0.42", "1", "10", 0.42),  # a sane gauge is the figure
    (None, "30000", "10000", None),  # used three times the pool: not a usage
])
async def test_a_kv_usage_outside_0_to_150_percent_is_not_recorded(usage, used, cap, expected):
    lines = [f'sglang:token_usage{{model_name="m",tp_rank="0"}} {usage}' if usage else "",
             f'sglang:num_used_tokens{{model_name="m",tp_rank="0"}} {used}' if used else "",
             f'sglang:max_total_num_tokens{{model_name="m",tp_rank="0"}} {cap}' if cap else "",
             'sglang:num_running_reqs{model_name="m",tp_rank="0"} 1']
    with BadServer() as srv:
        srv.faults["/metrics"] = "body:" + "\n".join(x for x in lines if x) + "\n"
        c = collector(srv.url)
        try:
            s = await scrape(c)
            assert s.up and s.source == "metrics", (s.state, s.reason)
            assert s.kv_usage == (pytest.approx(expected) if expected is not None else None)
        finally:
            await c.aclose()

"""The streaming client against a real sim: token counting, keep-alive reuse, auth errors."""

import asyncio
import time

from simproc import start_sim
from specmon.load.client import GenerateClient, RequestOutcome
from specmon.load.workload import Workload


async def send(client, prompt, n, rid="r"):
    o = RequestOutcome(request_id=rid, t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
    return await client.generate(prompt, n, o)


def test_tokens_counted_from_completion_tokens_and_connections_reused(monkeypatch):
    monkeypatch.setenv("SIM_KEY", "k-1")
    with start_sim("--profile", "fp8-mtp", "--enable-metrics", "--api-key", "k-1", speed=50) as sim:
        async def main():
            c = GenerateClient(sim.url, max_concurrency=4, api_key_env="SIM_KEY")
            w = Workload(input_len=128, seed=3)
            outs = []
            for round_ in range(3):
                outs += await asyncio.gather(*[send(c, w.prompt(i), 40, f"{round_}-{i}") for i in range(4)])
            made = len(c._all) - 1  # minus the one kept for flush_cache
            await c.aclose()
            return outs, made
        outs, made = asyncio.run(main())
    assert made == 4  # one connection per stream, reused across the 3 rounds
    for o in outs:
        assert o.status == "ok", o.error
        assert o.completion_tokens == 40 and o.prompt_tokens == 128
        assert sum(n for _, n in o.token_events) == 40      # every token accounted for
        assert o.events < 40                                 # speculative chunks carry several
        # one ITL per token after the first chunk (bench_serving's rule: tokens that came with
        # the first token have no gap of their own)
        assert len(o.itls()) == 40 - o.token_events[0][1]
        rec = o.record("a", 0, 4, 50.0, True)
        # A sped-up sim is timed by its own stamps (the client's wall overhead would count x50).
        m = o.final_meta
        assert rec.timing == "server"
        assert rec.ttft_s == m["response_sent_to_client_ts"] - m["request_received_ts"]
        assert rec.e2e_s == m["request_finished_ts"] - m["request_received_ts"]
        assert 0 < rec.ttft_s < rec.e2e_s <= o.e2e * 50.0 * 1.01  # the sim's clock never runs ahead
        assert rec.spec_verify_ct == m["spec_verify_ct"]
        assert rec.accept_length == 40 / rec.spec_verify_ct
        real = o.record("a", 0, 4, 1.0, True)  # a real server: always this client's own clock
        assert real.timing == "client" and real.ttft_s == o.ttft and real.e2e_s == o.e2e


def test_wrong_key_is_a_recorded_error(monkeypatch):
    monkeypatch.setenv("SIM_KEY", "wrong")
    with start_sim("--profile", "fp8-mtp", "--api-key", "right", speed=50) as sim:
        async def main():
            c = GenerateClient(sim.url, max_concurrency=1, api_key_env="SIM_KEY")
            o = await send(c, Workload(input_len=8).prompt(0), 4)
            await c.aclose()
            return o
        o = asyncio.run(main())
    assert o.status == "error" and o.error.startswith("HTTP 401")
    assert o.ttft is None and o.e2e is None and "wrong" not in o.error

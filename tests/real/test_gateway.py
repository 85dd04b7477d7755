"""specmon in front of the real SGLang Model Gateway (`smg`) with a real SGLang server behind it
(the same gateway with simulated workers: tests/e2e/test_gateway.py)."""

from __future__ import annotations

import asyncio

import pytest

from helpers.gateway import SPEED, post, regular
from helpers.gatewayproc import have_gateway, start_gateway
from specmon.sources.gateway import GatewayFleet, probe

pytestmark = pytest.mark.skipif(not have_gateway(), reason="smg (pip install smg) is not installed")



# --------------------------------------------------------------------------------------------


@pytest.mark.real_sglang
def test_a_real_sglang_server_behind_the_real_gateway(tmp_path):
    from helpers import realsglang as rs

    if rs.missing():
        pytest.skip(rs.missing())
    with rs.start_real(tmp_path / "sglang.log") as real:
        with start_gateway("--worker-urls", real.url, workers=1, timeout=60) as gw:
            async def probes():
                return (await probe(real.url)).kind, (await probe(gw.url)).kind

            assert asyncio.run(probes()) == ("server", "gateway")  # real SGLang has no /workers
            status, body = post(gw.url + "/generate", {"text": "t1 t2 t3", "sampling_params": {"max_new_tokens": 4}})
            assert status == 200, body
            fleet = GatewayFleet(gw.url, metrics_url=gw.metrics_url)

            async def two():
                try:
                    await fleet.poll()
                    await asyncio.sleep(0.5)
                    return await fleet.poll()
                finally:
                    await fleet.aclose()

            reading = asyncio.run(two())
            (w,) = reading.workers
            assert (w.url, w.role) == (real.url, "regular")
            st = reading.status
            assert st.up and (st.healthy, st.total) == (1, 1) and st.policy is not None
            # one worker: /engine_metrics merges nothing and answers; the gateway's reading of it is
            # SGLang's own series, parsed as a direct scrape would be
            s = reading.samples[w.name]
            assert s.up and s.source == "gateway" and s.kv_capacity_tokens == 8192, (st.reason, s)
            assert s.requests_finished_total is not None and s.requests_finished_total >= 1

"""Attach-side faults against a real (bad) HTTP server on 127.0.0.1: every fault becomes a
Sample with a state and a reason, never an exception, and the scrape after the fault clears
reads the server again. Also: the retry back-off after thousands of failures, odd numbers in
/metrics and in the JSON endpoints, and env proxies kept away from loopback scrapes."""

from __future__ import annotations


from helpers.simproc import free_port
from specmon import clock
from specmon.model import ArmSpec
from specmon.sources.sglang import ArmCollector


async def test_2000_refused_scrapes_keep_returning_a_state():
    """The back-off doubled without a ceiling on the exponent: failure 1,025 raised OverflowError.
    2,000 real failures (about 1 ms each) go well past it; past the ceiling nothing changes."""
    port = free_port()
    c = ArmCollector(ArmSpec("gone", f"http://127.0.0.1:{port}"), timeout_s=1.0,
                     retry_min_s=1e-9, retry_max_s=1e-6)
    try:
        for i in range(2000):
            s = await c.scrape()
            assert not s.up
        assert c._failures == 2000  # every scrape really tried (and failed)
        assert s.state == "refused" and str(port) in s.reason
        assert c._retry_at - clock.wall() <= 1e-6  # the delay is at its ceiling, no more
    finally:
        await c.aclose()

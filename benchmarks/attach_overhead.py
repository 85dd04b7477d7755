"""What watching costs: CPU (share of one core) and RSS of `specmon attach --headless` with 3
simulated arms at 1 Hz, and the time to scrape and parse one arm's /metrics.

    .venv/bin/python benchmarks/attach_overhead.py [--seconds 60] [--scrapes 50]

The sims are busy (a small closed loop each) so /metrics carries populated histograms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers.simproc import start_sim  # noqa: E402

from specmon.model import ArmSpec  # noqa: E402
from specmon.sources.prom import MetricsSnapshot  # noqa: E402
from specmon.sources.sglang import USED_METRICS, ArmCollector  # noqa: E402


def keep_busy(url: str, stop: threading.Event, concurrency: int = 4) -> None:
    def loop() -> None:
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                c.post(url + "/generate", json={"input_ids": [5] * 1024,
                                                "sampling_params": {"max_new_tokens": 256, "ignore_eos": True}})
    for _ in range(concurrency):
        threading.Thread(target=loop, daemon=True).start()


async def scrape_times(url: str, n: int) -> list[float]:
    c = ArmCollector(ArmSpec("bench", url), timeout_s=10)
    await c.scrape()  # first contact also reads /server_info
    times = []
    for _ in range(n):
        t = time.perf_counter()
        s = await c.scrape()
        times.append(time.perf_counter() - t)
        assert s.up, s.reason
    await c.aclose()
    return times


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--speed", type=float, default=10.0)
    a = ap.parse_args()
    stop = threading.Event()
    with ExitStack() as stack:
        sims = [stack.enter_context(start_sim("--enable-metrics", "--profile", prof, speed=a.speed))
                for prof in ("fp8-mtp", "nvfp4-mtp", "nvfp4-mtp")]
        for s in sims:
            keep_busy(s.url, stop)
        time.sleep(1.0)
        body = httpx.get(sims[0].url + "/metrics").text
        metrics_bytes = len(body)
        parse_ms = []
        for _ in range(a.scrapes):
            t = time.perf_counter()
            MetricsSnapshot.parse(body, ts=0.0, only=USED_METRICS)
            parse_ms.append((time.perf_counter() - t) * 1000)
        times = asyncio.run(scrape_times(sims[0].url, a.scrapes))

        out = Path(tempfile.mkdtemp(prefix="specmon-bench-"))
        cmd = [sys.executable, "-m", "specmon", "attach", *[s.url for s in sims], "--headless",
               "--duration", str(a.seconds), "--interval", "1", "--out", str(out / "session")]
        proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ps = psutil.Process(proc.pid)
        time.sleep(min(3.0, a.seconds / 4))  # past interpreter start-up and the first tick
        c0, t0 = ps.cpu_times(), time.monotonic()
        rss = []
        while proc.poll() is None:
            try:
                rss.append(ps.memory_info().rss)
                c1, t1 = ps.cpu_times(), time.monotonic()
            except psutil.Error:
                break
            time.sleep(0.5)
        stdout, stderr = proc.communicate()
        stop.set()
    if proc.returncode != 0:
        print(stderr, file=sys.stderr)
        return 1
    cpu_share = ((c1.user + c1.system) - (c0.user + c0.system)) / (t1 - t0)
    ticks = sum(1 for ln in stdout.splitlines() if " run " in ln)
    print(f"attach --headless, 3 busy simulated arms, 1 Hz, {a.seconds:g} s ({ticks} tick lines):")
    print(f"  CPU: {cpu_share * 100:.1f}% of one core (steady state, after start-up)")
    print(f"  RSS: median {statistics.median(rss) / 2**20:.0f} MiB, max {max(rss) / 2**20:.0f} MiB")
    print(f"scrape + parse of one arm (/metrics {metrics_bytes / 1024:.0f} KiB, busy), {len(times)} scrapes:")
    print(f"  median {statistics.median(times) * 1000:.1f} ms, p90 "
          f"{sorted(times)[int(0.9 * (len(times) - 1))] * 1000:.1f} ms, min {min(times) * 1000:.1f} ms")
    print(f"  of which parsing alone: median {statistics.median(parse_ms):.1f} ms (the rest is the HTTP round trip"
          " and the server producing the body)")
    print(f"  host: {psutil.cpu_count()} CPUs, load avg {psutil.getloadavg()[0]:.1f} (shared machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What watching costs the *server*: CPU seconds its processes spend per scrape of the GETs
specmon's collector sends each tick (/metrics, /server_info), and the round trip.

attach_overhead.py measures specmon's side. This measures the other side, because a scrape is
rendered on the server's HTTP event loop (SGLang's tokenizer manager renders the multiprocess
registry there): while it renders, that loop neither admits requests nor writes tokens.
benchmarks/client_vs_bench_serving.py saw the simulator's own TTFT rise 7-9 % at C=32 when only
one of the two runs was scraped at 1 Hz.

Method: an idle server's process tree (psutil, children included) is timed for --seconds with
no scrapes, then for --seconds while scraping at --rate Hz; (CPU with - CPU without) / scrapes.
Idle, so nothing else moves the CPU figure; /metrics still carries every series a busy server
has (the server is warmed with a few requests first).

    .venv/bin/python benchmarks/scrape_cost.py [--server sim|real|both] [--seconds 20] [--rate 5]
                                               [--client collector|httpx|both]

--client: `collector` scrapes as specmon's collectors do (sources/http.py: one kept-alive
connection, Accept-Encoding: identity); `httpx` as an httpx client does by default (it asks
for gzip, which the server then compresses on its event loop for every scrape).

Measured (2026-12-01, shared 2-core machine, load 0.5-0.9; --server sim --seconds 12 --rate 5):
  specmon sim, collector client: server CPU per scrape (/metrics 40 KiB + /server_info) 9.3 ms,
      round trip median 10.1 ms
  specmon sim, httpx client:     11.3 ms, round trip median 15.6 ms
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import realsglang  # noqa: E402
from helpers.simproc import start_sim  # noqa: E402


def tree_cpu(pid: int) -> float:
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _collector_gets(url: str, seconds: float, rate: float) -> tuple[list[float], int]:
    """Scrapes through the collectors' own client, on an event loop as in a session."""
    import asyncio
    from urllib.parse import urlsplit

    from specmon.sources.http import LeanClient

    async def run() -> tuple[list[float], int]:
        u = urlsplit(url)
        c = LeanClient(u.hostname, u.port, timeout_s=60)
        rtts, size = [], 0
        try:
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end:
                t = time.perf_counter()
                size = len((await c.get("/metrics", {}, 2**25))[1])
                await c.get("/server_info", {}, 2**22)
                rtts.append(time.perf_counter() - t)
                await asyncio.sleep(max(0.0, 1.0 / rate - (time.perf_counter() - t)))
        finally:
            await c.aclose()
        return rtts, size

    return asyncio.run(run())


def measure(name: str, url: str, pid: int, seconds: float, rate: float, client: str) -> None:
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(4):  # populate the histograms a busy server has
            c.post("/generate", json={"input_ids": [7 + i] * 64,
                                      "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}})
        time.sleep(2.0)
        c0 = tree_cpu(pid)
        time.sleep(seconds)
        idle = tree_cpu(pid) - c0
        rtts, size = [], 0
        c0 = tree_cpu(pid)
        if client == "collector":
            rtts, size = _collector_gets(url, seconds, rate)
        else:
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end:
                t = time.perf_counter()
                size = len(c.get("/metrics").content)
                c.get("/server_info")
                rtts.append(time.perf_counter() - t)
                time.sleep(max(0.0, 1.0 / rate - (time.perf_counter() - t)))
        busy = tree_cpu(pid) - c0
    per = (busy - idle) / len(rtts)
    print(f"{name}, {client} client: /metrics {size / 1024:.0f} KiB; {len(rtts)} scrapes (/metrics + /server_info) "
          f"in {seconds:g} s")
    print(f"  server CPU per scrape {per * 1000:.1f} ms (idle tree {idle / seconds * 100:.1f}% of a core, "
          f"scraped {busy / seconds * 100:.1f}%); at 1 Hz that is {per * 100:.1f}% of one core")
    print(f"  round trip median {statistics.median(rtts) * 1000:.1f} ms, max {max(rtts) * 1000:.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=["sim", "real", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=5.0, help="scrapes per second while measuring")
    ap.add_argument("--client", choices=["collector", "httpx", "both"], default="both")
    a = ap.parse_args()
    clients = ["collector", "httpx"] if a.client == "both" else [a.client]
    if a.server in ("sim", "both"):
        with start_sim("--enable-metrics", "--profile", "fp8-mtp", "--startup-s", "1", speed=1, timeout=60) as sim:
            for client in clients:
                measure("specmon sim (fp8-mtp)", sim.url, sim.proc.pid, a.seconds, a.rate, client)
    if a.server in ("real", "both"):
        why = realsglang.missing()
        if why:
            print(f"real SGLang: skipped ({why})")
            return 0
        log = Path(tempfile.mkdtemp(prefix="specmon-scrape-")) / "sglang.log"
        with realsglang.start_real(log) as real:
            for client in clients:
                measure("real SGLang 0.5.10 (CPU engine)", real.url, real.proc.pid, a.seconds, a.rate, client)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A fleet of 64 simulated SGLang workers (one `specmon sim --workers 64` process) behind the
REAL SGLang Model Gateway (smg), watched by `specmon attach GATEWAY --headless` at 1 Hz:
what specmon costs (CPU share of one core, RSS), how long a tick takes with 64 workers, and how
fast the TUI's fleet table redraws with 64 rows (a Textual run_test pilot).

    .venv/bin/python benchmarks/gateway_fleet.py [--workers 64] [--seconds 60] [--busy 8]

Three phases, one after the other so they do not share the CPU:
1. `specmon attach GATEWAY --headless --interval 1` as its own process for --seconds: CPU share
   (after a warm-up) and RSS from psutil; the tick grid (gaps between ticks' timestamps) and each
   worker's scrape time from the samples.csv it records.
2. The same wiring in this process (wiring.gateway_fleets, LiveSession as attach builds it) for
   --tick-seconds, with one more consumer of the event stream: a tick's poll time is the time from
   its start (SamplesTick.ts) to its SamplesTick reaching the consumers (every worker's scrape,
   the gateway's poll, the CSV rows written: a tick waits for them until 0.8 of its interval,
   then a late answer is used on a later tick); the gateway's own poll is timed beside it.
3. The TUI: the session recorded in phase 1 replayed into the real app (run_test, 200x60); then
   one recorded tick at a time is handed to the app as the live session hands it over, and the
   time until the app is idle again (state applied, fleet table redrawn with 64 rows, screen
   refreshed) is measured, and the table's own redraw alone.

A closed loop of --busy streams through the gateway keeps the workers' figures moving. The
gateway gets a local, empty model folder and HF_ENDPOINT on a closed loopback port: it never
reaches past this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, suppress
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
from helpers.gatewayproc import have_gateway, start_gateway  # noqa: E402
from prometheus_fleet import free_base_port, pct, start_group, stop_group, wait_until  # noqa: E402


def keep_busy(url: str, stop: threading.Event, streams: int) -> None:
    def loop() -> None:
        with httpx.Client(timeout=120) as c:
            while not stop.is_set():
                with suppress(httpx.HTTPError):
                    c.post(url + "/generate", json={"input_ids": [5] * 512,
                                                    "sampling_params": {"max_new_tokens": 128, "ignore_eos": True}})
    for _ in range(streams):
        threading.Thread(target=loop, daemon=True).start()


def phase_attach(gw, seconds: float, out: Path, tmp: Path) -> dict:
    attach = subprocess.Popen(
        [sys.executable, "-m", "specmon", "attach", gw.url, "--gateway-metrics", gw.metrics_url, "--headless",
         "--duration", f"{seconds:g}", "--interval", "1", "--out", str(out)],
        cwd=str(REPO), stdout=open(tmp / "attach.out", "wb"), stderr=open(tmp / "attach.err", "wb"),
        stdin=subprocess.DEVNULL)
    proc = psutil.Process(attach.pid)
    warm = 10.0
    time.sleep(warm)  # imports, the first poll, 64 collectors starting: left out of the CPU share
    c0, w0 = proc.cpu_times(), time.monotonic()
    c1, w1 = c0, w0
    rss = []
    while attach.poll() is None:
        with suppress(psutil.Error):
            rss.append(proc.memory_info().rss)
            c1, w1 = proc.cpu_times(), time.monotonic()
        time.sleep(1.0)
    if attach.returncode != 0:
        raise RuntimeError(f"attach exited {attach.returncode}:\n{(tmp / 'attach.err').read_text()[-3000:]}")
    with open(out / "samples.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["arm"] and not r["dp_rank"]]
    ticks: dict[str, list[dict]] = {}
    for r in rows:
        ticks.setdefault(r["ts"], []).append(r)
    ts = sorted(float(t) for t in ticks)
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    up = [sum(1 for r in rs if r["state"] == "up") for rs in ticks.values()]
    scrape = [float(r["scrape_s"]) for r in rows if r["scrape_s"]]
    cpu = (c1.user + c1.system - c0.user - c0.system) / max(w1 - w0, 1e-9)
    return {"cpu": cpu, "warm": warm, "rss_max": max(rss), "rss_last": rss[-1], "ticks": len(ticks),
            "workers_last": len(list(ticks.values())[-1]), "up_median": statistics.median(up), "gaps": gaps,
            "scrape": scrape, "stderr": (tmp / "attach.err").read_text().strip().splitlines()[:1]}


def phase_ticks(gw, seconds: float, out: Path) -> dict:
    from specmon.model import ArmSpec, SamplesTick
    from specmon.session.live import LiveSession
    from specmon.wiring import gateway_fleets

    arms, fleets = gateway_fleets([ArmSpec(name="gw", url=gw.url)], metrics_url=gw.metrics_url)
    fleet = fleets[0]
    polls: list[float] = []
    real_poll = fleet.poll

    async def timed_poll():
        t = time.perf_counter()
        try:
            return await real_poll()
        finally:
            polls.append(time.perf_counter() - t)

    fleet.poll = timed_poll  # timing around the real poll, nothing else changed
    tick_s: list[float] = []
    n_samples: list[int] = []

    def consume(e) -> None:
        if isinstance(e, SamplesTick):
            tick_s.append(time.time() - e.ts)
            n_samples.append(len(e.samples))

    live = LiveSession(arms, interval=1.0, out_dir=out, mode="attach", consumers=[consume], fleets=fleets)

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, stop.set)
        await live.run(lambda e: None, stop)

    asyncio.run(main())
    steady = [t for t, n in zip(tick_s, n_samples) if n >= 60][3:]  # after the workers joined and warmed up
    return {"ticks": len(tick_s), "steady": steady, "polls": polls[3:], "workers": max(n_samples or [0])}


async def phase_tui(folder: Path, rounds: int) -> dict:
    from specmon.model import SamplesTick
    from specmon.session.replay import ReplaySource
    from specmon.tui.app import SpecmonApp
    from specmon.tui.widgets.fleet import FleetTable

    class QuietApp(SpecmonApp):
        def notify(self, *a, **k) -> None:  # 64 "joined" toasts are not what is measured
            return None

    src = ReplaySource(folder, speed=1e9)
    ticks = [e for e in src.events if isinstance(e, SamplesTick) and len(e.samples) >= 60]
    app = QuietApp(src, title="bench")
    emit_s, table_s = [], []
    async with app.run_test(size=(200, 60)) as pilot:
        for _ in range(500):
            if app.query_one("StatusBar").stopped is not None:
                break
            await pilot.pause(0.02)
        table = app.query_one(FleetTable)
        rows = table.row_count
        for k in range(rounds):
            e = ticks[k % len(ticks)]
            t = time.perf_counter()
            app.emit(e)  # as the live session hands a tick over
            await pilot.pause()  # until the app is idle: message handled, table redrawn, screen refreshed
            emit_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            table.redraw()
            table_s.append(time.perf_counter() - t)
            await pilot.pause()
    return {"rows": rows, "emit": emit_s, "table": table_s, "fleet_mode": app.fleet_mode}


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:.0f} ms, p95 {pct(xs, 0.95) * 1000:.0f} ms, max {max(xs) * 1000:.0f} ms"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long specmon attach runs (phase 1)")
    ap.add_argument("--tick-seconds", type=float, default=30.0, help="the in-process tick timing (phase 2)")
    ap.add_argument("--rounds", type=int, default=40, help="ticks handed to the TUI (phase 3)")
    ap.add_argument("--busy", type=int, default=8, help="closed-loop streams through the gateway")
    ap.add_argument("--speed", type=float, default=10.0)
    args = ap.parse_args()
    if not have_gateway():
        print("smg is not installed (pip install smg)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="specmon-bench-gw-"))
    model = tmp / "model"
    model.mkdir()
    stop = threading.Event()
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        stack.callback(stop.set)
        base = free_base_port(args.workers)
        sim = start_group([sys.executable, "-m", "specmon", "sim", "--workers", str(args.workers), "--port", str(base),
                           "--enable-metrics", "--model-path", str(model), "--startup-s", "0.5",
                           "--speed", f"{args.speed:g}"], tmp / "sim.log")
        stack.callback(stop_group, sim)
        urls = [f"http://127.0.0.1:{base + i}" for i in range(args.workers)]
        t0 = time.monotonic()
        wait_until(f"{args.workers} simulated workers healthy",
                   lambda: all(httpx.get(urls[k] + "/health", timeout=2).status_code == 200
                               for k in (0, len(urls) // 2, len(urls) - 1)), 120)
        print(f"sim: {args.workers} workers in one process, healthy after {time.monotonic() - t0:.1f} s", flush=True)
        t0 = time.monotonic()
        gw = stack.enter_context(start_gateway("--worker-urls", *urls, "--policy", "round_robin",
                                               workers=args.workers, timeout=180))
        print(f"gateway: smg with {args.workers} healthy workers after {time.monotonic() - t0:.1f} s", flush=True)
        keep_busy(gw.url, stop, args.busy)
        time.sleep(3.0)

        a = phase_attach(gw, args.seconds, tmp / "attach-session", tmp)
        print(a["stderr"][0] if a["stderr"] else "")
        print(f"phase 1, specmon attach GATEWAY --headless at 1 Hz for {args.seconds:g} s: {a['ticks']} ticks, "
              f"{a['workers_last']} workers in the last, {a['up_median']:.0f} up in the median tick")
        print(f"  CPU {a['cpu'] * 100:.1f}% of one core (after {a['warm']:g} s warm-up), "
              f"RSS max {a['rss_max'] / 2**20:.0f} MiB, last {a['rss_last'] / 2**20:.0f} MiB")
        print(f"  tick grid: gap between ticks {ms(a['gaps'])}; one worker's scrape {ms(a['scrape'])}")

        t = phase_ticks(gw, args.tick_seconds, tmp / "tick-session")
        print(f"phase 2, in process, {t['ticks']} ticks, {t['workers']} workers: poll time per tick (start to the "
              f"SamplesTick handed to the consumers) {ms(t['steady'])}")
        if t["polls"]:
            print(f"  the gateway's own poll (/workers, /readiness, its /get_loads fan-out to every worker, its metrics) "
                  f"{ms(t['polls'])}")
        stop.set()

        u = asyncio.run(phase_tui(tmp / "attach-session", args.rounds))
        print(f"phase 3, TUI (run_test pilot, 200x60), fleet table of {u['rows']} rows "
              f"(fleet mode {u['fleet_mode']}): a tick handed over until the app is idle {ms(u['emit'])}; "
              f"FleetTable.redraw alone {ms(u['table'])}")
        print(f"host: {psutil.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

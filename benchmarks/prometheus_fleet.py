"""A fleet of 500 simulated SGLang workers scraped by a real Prometheus, watched by
`specmon attach --prometheus URL --headless`: per tick, how many queries specmon sends and how long
a poll takes; what specmon costs (CPU share of one core, RSS); what Prometheus costs beside it.

    .venv/bin/python benchmarks/prometheus_fleet.py [--workers 500] [--procs 5] [--scrape-interval 5]
                                                  [--seconds 60] [--busy 3]

The workers are `specmon sim --workers N --port P --enable-metrics` processes (each serves N
simulated servers on ports P..P+N-1; --procs of them share the fleet). A few workers get a small
closed loop of /generate requests so the fleet has live figures. Queries per tick come from
Prometheus's own counter of /api/v1/query requests (prometheus_http_requests_total), poll times
from samples.csv's scrape_s (the wall time of one poll: every query, answers parsed).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import signal
import socket
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


def free_base_port(n: int) -> int:
    """A base port with n free ports above it."""
    for base in range(20000, 32000, 1000):  # below Linux's ephemeral ports
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the sims listen
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError(f"no {n} free ports in a row")


def start_group(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(REPO), start_new_session=True)


def stop_group(p: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to the process's group, SIGKILL after grace_s seconds."""
    if p.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)


def wait_until(what: str, ok, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():
                return
        except (httpx.HTTPError, OSError, KeyError, IndexError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what}: not after {timeout:g} s")


def prom_counter(url: str, name: str, handler: str) -> float:
    """A counter of Prometheus's own /metrics, summed over its series with handler=..."""
    text = httpx.get(url + "/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'handler="{handler}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def keep_busy(url: str, stop: threading.Event, concurrency: int = 2) -> None:
    def loop() -> None:
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                with suppress(httpx.HTTPError):
                    c.post(url + "/generate", json={"input_ids": [5] * 512,
                                                    "sampling_params": {"max_new_tokens": 128, "ignore_eos": True}})
    for _ in range(concurrency):
        threading.Thread(target=loop, daemon=True).start()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=500)
    ap.add_argument("--procs", type=int, default=5, help="sim processes the workers are spread over")
    ap.add_argument("--scrape-interval", type=float, default=5.0, help="Prometheus's scrape interval, seconds")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long specmon attach runs")
    ap.add_argument("--interval", type=float, default=1.0, help="specmon's tick")
    ap.add_argument("--busy", type=int, default=3, help="workers given a small closed loop of requests")
    args = ap.parse_args()
    prom_bin = shutil.which("prometheus")
    if prom_bin is None:
        print("prometheus is not installed (Debian: apt-get install -y prometheus)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="specmon-bench-prom-"))
    base = free_base_port(args.workers)
    per = -(-args.workers // args.procs)
    stop = threading.Event()
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        stack.callback(stop.set)
        sims, ports = [], []
        for i in range(args.procs):
            n = min(per, args.workers - i * per)
            if n <= 0:
                break
            port = base + i * per
            p = start_group([sys.executable, "-m", "specmon", "sim", "--workers", str(n), "--port", str(port),
                             "--enable-metrics", "--startup-s", "0.5", "--speed", "1"], tmp / f"sim{i}.log")
            stack.callback(stop_group, p)
            sims.append(p)
            ports += list(range(port, port + n))
        t0 = time.monotonic()
        wait_until(f"{len(ports)} simulated workers healthy",
                   lambda: all(httpx.get(f"http://127.0.0.1:{ports[k]}/health", timeout=2).status_code == 200
                               for k in (0, len(ports) // 2, len(ports) - 1)), 120)
        print(f"sims: {len(ports)} workers in {len(sims)} processes, healthy after {time.monotonic() - t0:.1f} s",
              flush=True)
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
        s = f"{args.scrape_interval:g}s"
        (tmp / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {s}\n  scrape_timeout: {s}\nscrape_configs:\n"
            f"  - job_name: sglang\n    static_configs:\n      - targets: [{targets}]\n")
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            prom_port = sk.getsockname()[1]
        prom_url = f"http://127.0.0.1:{prom_port}"
        prom = start_group([prom_bin, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                            f"--web.listen-address=127.0.0.1:{prom_port}"], tmp / "prometheus.log")
        stack.callback(stop_group, prom)
        wait_until("prometheus ready", lambda: httpx.get(prom_url + "/-/ready", timeout=2).status_code == 200, 60)

        def all_scraped() -> bool:
            r = httpx.get(prom_url + "/api/v1/query", params={"query": 'count(sglang_num_running_reqs or sglang:num_running_reqs)'},
                          timeout=10).json()["data"]["result"]
            seen["n"] = int(float(r[0]["value"][1])) if r else 0
            return seen["n"] >= 0.95 * len(ports)

        seen = {"n": 0}
        wait_until("95% of the workers' series in Prometheus", all_scraped, 120 + 4 * args.scrape_interval)
        print(f"prometheus: {len(ports)} targets every {s}, {seen['n']} with series", flush=True)
        for p in ports[:args.busy]:
            keep_busy(f"http://127.0.0.1:{p}", stop)
        time.sleep(2 * args.scrape_interval)

        out = tmp / "session"
        q0 = prom_counter(prom_url, "prometheus_http_requests_total", "/api/v1/query")
        d0 = prom_counter(prom_url, "prometheus_http_request_duration_seconds_sum", "/api/v1/query")
        attach = subprocess.Popen(
            [sys.executable, "-m", "specmon", "attach", "--prometheus", prom_url, "--selector", '{job="sglang"}',
             "--headless", "--duration", f"{args.seconds:g}", "--interval", f"{args.interval:g}", "--out", str(out)],
            cwd=str(REPO), stdout=open(tmp / "attach.out", "wb"), stderr=open(tmp / "attach.err", "wb"),
            stdin=subprocess.DEVNULL)
        proc = psutil.Process(attach.pid)
        promp = psutil.Process(prom.pid)
        warm = 10.0
        time.sleep(warm)  # startup (imports, the first reading) left out of the CPU share
        c0, w0, pc0 = proc.cpu_times(), time.monotonic(), promp.cpu_times()
        rss = []
        while attach.poll() is None:
            with suppress(psutil.Error):
                rss.append(proc.memory_info().rss)
                c1, w1, pc1 = proc.cpu_times(), time.monotonic(), promp.cpu_times()
            time.sleep(1.0)
        q1 = prom_counter(prom_url, "prometheus_http_requests_total", "/api/v1/query")
        d1 = prom_counter(prom_url, "prometheus_http_request_duration_seconds_sum", "/api/v1/query")
        prom_rss = promp.memory_info().rss
        err = (tmp / "attach.err").read_text()
        if attach.returncode != 0:
            print(f"attach exited {attach.returncode}:\n{err[-3000:]}", file=sys.stderr)
            return 1
        with open(out / "samples.csv", newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["arm"]]
        ticks: dict[str, list[dict]] = {}
        for r in rows:
            ticks.setdefault(r["ts"], []).append(r)
        poll_s = [float(r[0]["scrape_s"]) for r in ticks.values() if r[0]["scrape_s"]]
        states: dict[str, int] = {}
        for r in rows:
            states[r["state"]] = states.get(r["state"], 0) + 1
        down_ticks = sum(1 for rs in ticks.values() if (rs[0]["reason"] or "").startswith("no reading: Prometheus"))
        cpu = (c1.user + c1.system - c0.user - c0.system) / (w1 - w0)
        pcpu = (pc1.user + pc1.system - pc0.user - pc0.system) / (w1 - w0)
        n_ticks = len(ticks)
        print(err.strip().splitlines()[0] if err.strip() else "")
        print(f"ticks recorded: {n_ticks} ({len(rows)} worker rows), workers in the last tick: "
              f"{len(list(ticks.values())[-1])}; rows by state {states}; ticks with the fleet down: {down_ticks}")
        print(f"queries to Prometheus: {q1 - q0:.0f} in {args.seconds:g} s = {(q1 - q0) / max(n_ticks, 1):.2f} per tick "
              f"(Prometheus's own time per query: mean {(d1 - d0) / max(q1 - q0, 1) * 1000:.1f} ms)")
        if poll_s:
            print(f"poll (all queries, answers parsed): median {statistics.median(poll_s) * 1000:.0f} ms, "
                  f"p95 {pct(poll_s, 0.95) * 1000:.0f} ms, max {max(poll_s) * 1000:.0f} ms")
        measured = [t for t in ticks if float(t) >= time.time() - (time.monotonic() - w0)]
        per_tick = (c1.user + c1.system - c0.user - c0.system) / max(1, len(measured))
        print(f"specmon attach: {per_tick * 1000:.0f} ms of CPU per tick over {len(measured)} ticks "
              f"(the share of a core at 1 tick/s; contention does not inflate it much)")
        print(f"specmon attach: CPU {cpu * 100:.1f}% of one core (after {warm:g} s warm-up), "
              f"RSS max {max(rss) / 2**20:.0f} MiB, last {rss[-1] / 2**20:.0f} MiB")
        print(f"prometheus beside it: CPU {pcpu * 100:.1f}% of one core, RSS {prom_rss / 2**20:.0f} MiB")
        print(f"host: {psutil.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A week of history for 500 workers: `specmon replay --prometheus URL --from -7d --to now` over a
real Prometheus TSDB, timed end to end, with the observed knee it finds per worker checked against
the knee the generated traffic has.

    .venv/bin/python benchmarks/observed_history.py [--workers 500] [--days 7] [--scrape-interval 60]
                                                    [--step S] [--keep DIR]

1. Writes the SGLang series that replay --prometheus queries (names, labels and histogram buckets
   as SGLang 0.5.23 exports them: tests/data/sglang-versions/, the reference sample) for every
   worker and scrape, as OpenMetrics text, one file per 18 h block at a time (a week of 500
   workers is tens of GB of text: never all on disk at once), and turns each into a TSDB block
   with Debian's `promtool tsdb create-blocks-from openmetrics`.
2. Starts Debian's `prometheus` on 127.0.0.1 over that data folder (no scrape targets: the global
   scrape interval in the config it reads says how often the history was scraped).
3. Runs `specmon replay --prometheus URL --from -Nd --to now --headless --out DIR` as a separate
   process and prints: series and samples in the TSDB, wall seconds, peak RSS of the replay,
   requests Prometheus answered (its own counter) and bytes it sent, rows written, and for each
   worker whether the observed knee and limit are the ones the traffic was made with.

The traffic: worker w can run K_w requests (8 to 64 across the fleet) before its KV pool is full
(token_usage ~0.97 at K_w); its offered load follows a day (a quarter of K_w at night, 1.25 K_w at
the peak, a phase of its own, some noise), so for a third of every day requests queue at
K_w running. The knee is K_w, the limit kv_pool.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, suppress
from pathlib import Path

import httpx
import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from prometheus_fleet import start_group, stop_group  # noqa: E402

BLOCK_S = 18 * 3600  # promtool's block for --max-block-duration=18h (2 h x 3^2): chunks never overlap
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# SGLang 0.5.23's default buckets (the reference sample)
TTFT_LE = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0]
QUEUE_LE = [0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0,
            90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0,
            1600.0, 1800.0, 2000.0, 2500.0, 3000.0]
TOKENS_PER_REQ = 1500  # KV tokens a running request holds
OUTPUT_PER_REQ = 400  # tokens a request generates
PROMPT_PER_REQ = 1100
DECODE_TOK_S = 40.0  # one lone request's tok/s; it slows to 60 % of that at the knee


def knee_of(w: int) -> int:
    return 8 + (w * 7) % 57


def traffic(w: int, t: np.ndarray, dt: float) -> dict[str, np.ndarray]:
    """Worker w's figures at scrape times t (unix seconds): gauges as they read at t, counters as
    their totals at t (from the window's start)."""
    k = knee_of(w)
    rng = np.random.default_rng(w)
    phase = (w * 2654435761 % 86400)
    day = 0.5 - 0.5 * np.cos(2 * np.pi * ((t - phase) % 86400) / 86400)
    offered = k * (0.25 + 1.0 * day) * (1 + 0.08 * rng.standard_normal(len(t)))
    offered = np.maximum(0, np.rint(offered)).astype(np.int64)
    running = np.minimum(offered, k)
    queued = offered - running
    tok_s = DECODE_TOK_S * running * (1 - 0.4 * running / k)
    req_s = tok_s / OUTPUT_PER_REQ
    done = req_s * dt  # requests finished in the interval before t (fractional; counters take floor of totals)
    # Little's law: the queue drains at the finishing rate
    queue_s = np.where(queued > 0, queued / np.maximum(req_s, 1e-9), 0.004)
    ttft_s = 0.12 + 0.002 * running + queue_s
    cap = k * 1550
    used = running * TOKENS_PER_REQ
    reqs = np.floor(np.cumsum(done)).astype(np.int64)
    n = np.diff(np.concatenate(([0], reqs)))  # whole requests finished per interval
    out = {
        "running": running, "queued": queued, "used": used, "cap": np.full(len(t), cap),
        "usage": used / cap, "gen": tok_s, "reqs": reqs,
        "decode": np.floor(np.cumsum(tok_s * dt)).astype(np.int64),
        "prefill": reqs * PROMPT_PER_REQ, "cached": reqs * 64,
        "ttft_sum": np.cumsum(n * ttft_s), "queue_sum": np.cumsum(n * queue_s),
        "itl_count": np.floor(np.cumsum(tok_s * dt)).astype(np.int64),
    }
    out["itl_sum"] = out["itl_count"] / (DECODE_TOK_S * 0.8)
    out["ttft_b"] = [np.cumsum(n * (ttft_s <= le)) for le in TTFT_LE]
    out["queue_b"] = [np.cumsum(n * (queue_s <= le)) for le in QUEUE_LE]
    return out


def _lines(prefix: str, values, ts: list[str], fmt) -> str:
    return "".join([f"{prefix}{fmt(v)} {t}\n" for v, t in zip(values, ts)])


def write_chunk(path: Path, workers: int, t_all: np.ndarray, lo: int, hi: int, dt: float) -> int:
    """OpenMetrics text of every worker's series for scrapes t_all[lo:hi]; returns samples written."""
    ts = [f"{t:.0f}" for t in t_all[lo:hi]]
    samples = 0
    i = int
    f = lambda v: f"{v:.6g}"  # noqa: E731
    with open(path, "w") as fh:
        for w in range(workers):
            tr = traffic(w, t_all, dt)
            inst = f'instance="10.{w // 250}.{w % 250}.1:30000",job="sglang"'
            rank = f'engine_type="unified",{inst},model_name="{MODEL}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
            plain = f'{inst},model_name="{MODEL}"'
            series = [
                (f"sglang:num_running_reqs{{{rank}}} ", tr["running"], i),
                (f"sglang:num_queue_reqs{{{rank}}} ", tr["queued"], i),
                (f"sglang:num_used_tokens{{{rank}}} ", tr["used"], i),
                (f"sglang:max_total_num_tokens{{{rank}}} ", tr["cap"], i),
                (f"sglang:token_usage{{{rank}}} ", tr["usage"], f),
                (f"sglang:gen_throughput{{{rank}}} ", tr["gen"], f),
                (f"sglang:spec_accept_length{{{rank}}} ", np.zeros(len(t_all)), i),
                (f"sglang:spec_accept_rate{{{rank}}} ", np.zeros(len(t_all)), i),
                (f"sglang:num_requests_total{{{plain}}} ", tr["reqs"], i),
                (f"sglang:prompt_tokens_total{{{plain}}} ", tr["prefill"], i),
                (f"sglang:generation_tokens_total{{{plain}}} ", tr["decode"], i),
                (f'sglang:cached_tokens_total{{cache_source="device",{plain}}} ', tr["cached"], i),
                (f'sglang:realtime_tokens_total{{engine_type="unified",{inst},mode="decode",model_name="{MODEL}",'
                 f'moe_ep_rank="0",pp_rank="0",tp_rank="0"}} ', tr["decode"], i),
                (f'sglang:realtime_tokens_total{{engine_type="unified",{inst},mode="prefill_compute",'
                 f'model_name="{MODEL}",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} ', tr["prefill"] - tr["cached"], i),
                (f'sglang:realtime_tokens_total{{engine_type="unified",{inst},mode="prefill_cache",'
                 f'model_name="{MODEL}",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} ', tr["cached"], i),
                (f"sglang:time_to_first_token_seconds_sum{{{plain}}} ", tr["ttft_sum"], f),
                (f"sglang:time_to_first_token_seconds_count{{{plain}}} ", tr["reqs"], i),
                (f"sglang:queue_time_seconds_sum{{{rank}}} ", tr["queue_sum"], f),
                (f"sglang:queue_time_seconds_count{{{rank}}} ", tr["reqs"], i),
                (f"sglang:inter_token_latency_seconds_sum{{{plain}}} ", tr["itl_sum"], f),
                (f"sglang:inter_token_latency_seconds_count{{{plain}}} ", tr["itl_count"], i),
                (f"up{{{inst}}} ", np.ones(len(t_all)), i),
            ]
            for le, counts in zip(TTFT_LE, tr["ttft_b"]):
                series.append((f'sglang:time_to_first_token_seconds_bucket{{{inst},le="{le}",model_name="{MODEL}"}} ',
                               counts, i))
            series.append((f'sglang:time_to_first_token_seconds_bucket{{{inst},le="+Inf",model_name="{MODEL}"}} ',
                           tr["reqs"], i))
            for le, counts in zip(QUEUE_LE, tr["queue_b"]):
                series.append((f'sglang:queue_time_seconds_bucket{{engine_type="unified",{inst},le="{le}",'
                               f'model_name="{MODEL}",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} ', counts, i))
            series.append((f'sglang:queue_time_seconds_bucket{{engine_type="unified",{inst},le="+Inf",'
                           f'model_name="{MODEL}",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} ', tr["reqs"], i))
            for prefix, values, fmt in series:
                v = values[lo:hi].tolist()
                fh.write(_lines(prefix, v, ts, (lambda x: f"{x:.0f}") if fmt is int else fmt))
                samples += len(v)
            if w == 0:
                per_worker = len(series)
        fh.write("# EOF\n")
    write_chunk.series_per_worker = per_worker  # type: ignore[attr-defined]
    return samples


def build_tsdb(data: Path, workers: int, start: float, end: float, dt: float, work: Path) -> tuple[int, int, float]:
    """The TSDB: (series, samples, seconds taken)."""
    t0 = time.monotonic()
    t_all = np.arange(start, end + dt / 2, dt)  # both ends: every scrape of the window
    data.mkdir(parents=True, exist_ok=True)
    samples = 0
    edges = [0]
    for k, t in enumerate(t_all):
        if k and int(t // BLOCK_S) != int(t_all[k - 1] // BLOCK_S):
            edges.append(k)
    edges.append(len(t_all))
    for lo, hi in zip(edges[:-1], edges[1:]):
        text = work / "chunk.om"
        g0 = time.monotonic()
        samples += write_chunk(text, workers, t_all, lo, hi, dt)
        g1 = time.monotonic()
        r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                            "--max-block-duration=18h", str(text), str(data)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"promtool: {r.stderr[-2000:]}")
        print(f"  block {lo}..{hi} of {len(t_all)} scrapes: text {text.stat().st_size / 2**20:.0f} MiB in "
              f"{g1 - g0:.0f} s, promtool {time.monotonic() - g1:.0f} s", flush=True)
        text.unlink()
    series = workers * write_chunk.series_per_worker  # type: ignore[attr-defined]
    return series, samples, time.monotonic() - t0


def prom_counter(url: str, name: str, handler: str) -> float:
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") and f'handler="{handler}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=500)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--scrape-interval", type=float, default=60.0, help="seconds between the history's scrapes")
    ap.add_argument("--step", help="passed to replay as --step (default: replay chooses)")
    ap.add_argument("--keep", help="a folder to build the TSDB in and keep (reused when it holds one)")
    ap.add_argument("--from", dest="window", help="replay --from (default -<days>d)")
    args = ap.parse_args()
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (Debian: apt-get install -y prometheus)", file=sys.stderr)
            return 2
    with ExitStack() as stack:
        if args.keep:
            work = Path(args.keep)
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(tempfile.mkdtemp(prefix="specmon-bench-history-"))
            stack.callback(shutil.rmtree, work, True)
        data = work / "tsdb"
        meta = work / "built.json"
        if meta.exists():
            built = json.loads(meta.read_text())
            print(f"TSDB reused from {data}: {built}")
        else:
            end = math.floor(time.time() / args.scrape_interval) * args.scrape_interval
            start = end - args.days * 86400
            print(f"building: {args.workers} workers, {args.days:g} days at {args.scrape_interval:g} s", flush=True)
            series, samples, took = build_tsdb(data, args.workers, start, end, args.scrape_interval, work)
            built = {"workers": args.workers, "days": args.days, "scrape_interval": args.scrape_interval,
                     "start": start, "end": end, "series": series, "samples": samples, "build_s": round(took, 1)}
            meta.write_text(json.dumps(built))
        du = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
        print(f"TSDB: {built['series']:,} series, {built['samples']:,} samples, {du / 2**20:.0f} MiB on disk "
              f"(built in {built['build_s']:.0f} s)", flush=True)
        (work / "prometheus.yml").write_text(f"global:\n  scrape_interval: {built['scrape_interval']:g}s\n")
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        prom = start_group(["prometheus", f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                            "--storage.tsdb.retention.time=30d", f"--web.listen-address=127.0.0.1:{port}",
                            "--query.max-samples=200000000"], work / "prometheus.log")
        stack.callback(stop_group, prom, 30.0)  # a week-long TSDB takes a while to close
        deadline = time.monotonic() + 300
        while True:
            with suppress(httpx.HTTPError):
                if httpx.get(url + "/-/ready", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline or prom.poll() is not None:
                print((work / "prometheus.log").read_text()[-3000:], file=sys.stderr)
                return 1
            time.sleep(0.5)
        # the window: the history's own (a TSDB reused later is still replayed whole)
        window = args.window or f"{built['start']:.0f}"
        out = work / "session"
        shutil.rmtree(out, ignore_errors=True)
        handlers = ("/api/v1/query", "/api/v1/query_range")
        q0 = sum(prom_counter(url, "prometheus_http_requests_total", h) for h in handlers)
        b0 = sum(prom_counter(url, "prometheus_http_response_size_bytes_sum", h) for h in handlers)
        cmd = [sys.executable, "-m", "specmon", "replay", "--prometheus", url, "--from", window,
               "--to", f"{built['end']:.0f}", "--headless", "--out", str(out)]
        if args.step:
            cmd += ["--step", args.step]
        print("running:", " ".join(cmd[1:]), flush=True)
        w0 = time.monotonic()
        replay = subprocess.Popen(cmd, cwd=str(REPO), stdout=open(work / "replay.out", "wb"),
                                  stderr=open(work / "replay.err", "wb"), stdin=subprocess.DEVNULL)
        proc = psutil.Process(replay.pid)
        peak = 0
        while replay.poll() is None:
            with suppress(psutil.Error):
                peak = max(peak, proc.memory_info().rss)
            time.sleep(0.2)
        wall = time.monotonic() - w0
        q1 = sum(prom_counter(url, "prometheus_http_requests_total", h) for h in handlers)
        b1 = sum(prom_counter(url, "prometheus_http_response_size_bytes_sum", h) for h in handlers)
        err = (work / "replay.err").read_text()
        if replay.returncode != 0:
            print(f"replay exited {replay.returncode}:\n{err[-3000:]}", file=sys.stderr)
            return 1
        print(err.strip())
        print(f"replay: {wall:.1f} s wall, peak RSS {peak / 2**20:.0f} MiB, {q1 - q0:.0f} requests answered by "
              f"Prometheus, {(b1 - b0) / 2**20:.1f} MiB read")
        knees = json.loads((out / "session.json").read_text()).get("observed_knees") or {}
        right = near = 0
        wrong = []
        for w in range(built["workers"]):
            name = f"10.{w // 250}.{w % 250}.1:30000"
            k = knees.get(name) or {}
            c, want = k.get("concurrency"), knee_of(w)
            if c == want and k.get("limit") == "kv_pool":
                right += 1
            elif c is not None and abs(c - want) <= max(1, 0.1 * want) and k.get("limit") == "kv_pool":
                near += 1
            else:
                wrong.append(f"{name}: {c} ({k.get('limit')}) for {want}")
        print(f"observed knees: {right} of {built['workers']} exact, {near} within 10 %, {len(wrong)} off"
              + (f" (e.g. {'; '.join(wrong[:5])})" if wrong else ""))
        print(f"host: {psutil.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""specmon's load client against SGLang's own bench_serving, on the same simulated server and level.

1. starts `specmon sim` (speed --speed, so every wall figure is simulated / speed);
2. runs `sglang.bench_serving --backend sglang --dataset-name random-ids --random-range-ratio 1
   --tokenize-prompt --max-concurrency C --num-prompts P` against it (the venv in --sglang-python),
   while a thread scrapes /metrics and /server_info at 1 Hz as specmon does during its own run;
3. flushes the prefix cache, then runs one specmon ramp level at C with --requests-per-level P
   (RampDriver + LiveSession);
4. prints mean TTFT and output throughput of both, and the ratios (target: within 5 %), the
   server's own histogram means during each run (what each client should be compared with when
   the two runs loaded the server differently), plus specmon's client overhead.
Both sides measure the same way here: TTFT from send to first token; output throughput = all
output tokens / (last end - first send). Figures are in wall time (bench_serving knows nothing
of --speed), so specmon's scaled figures are converted back.
Pitfalls found on the way: without --tokenize-prompt bench_serving sends its random ids decoded
to text, which the simulator (no tokenizer: ~4 characters a token) counted as ~1,470 tokens; a
second run of the same seed finds its prompts in the prefix cache (TTFT 230 -> 47 ms); and only
specmon's run was being scraped (see Scraper).

    .venv/bin/python benchmarks/client_vs_bench_serving.py [--concurrency 32] [--prompts 480]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
from helpers import realsglang  # noqa: E402
from helpers.simproc import start_sim  # noqa: E402

from specmon.session.ramp import RampDriver  # noqa: E402
from specmon.model import ArmSpec, RampPlan  # noqa: E402
from specmon.session.live import LiveSession  # noqa: E402


def server_means(url: str) -> dict:
    """The server's own running sums (simulated seconds): TTFT, ITL, e2e histograms, tokens."""
    import httpx

    vals = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        for key in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
            for part in ("_sum", "_count"):
                if line.startswith(f"sglang:{key}{part}{{"):
                    vals[key + part] = float(line.rsplit(" ", 1)[1])
        if line.startswith("sglang:generation_tokens_total{"):
            vals["tokens"] = float(line.rsplit(" ", 1)[1])
    return vals


def delta_means(before: dict, after: dict, speed: float) -> dict:
    def m(key):
        # a labelled series appears only after its first observation: absent = 0 so far
        n = after.get(key + "_count", 0.0) - before.get(key + "_count", 0.0)
        d = after.get(key + "_sum", 0.0) - before.get(key + "_sum", 0.0)
        return d / n / speed * 1000 if n else float("nan")
    return {"ttft_ms": m("time_to_first_token_seconds"), "itl_ms": m("inter_token_latency_seconds"),
            "e2e_ms": m("e2e_request_latency_seconds")}


class Scraper:
    """GET /metrics and /server_info once a second in a thread, as specmon's LiveSession does while
    it ramps. A scrape is rendered on the server's HTTP event loop (17 ms of the simulator's CPU,
    25 ms of a real SGLang's, idle: benchmarks/scrape_cost.py); with only specmon's run scraped
    the server's own TTFT came out 7-9 % higher in it, with both scraped 6 % (the rest is the
    two runs' different prompts and arrivals). Both runs now carry the same observation load."""

    def __init__(self, url: str, interval: float = 1.0):
        import threading

        self.url, self.interval, self.times = url, interval, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as c:
            while not self._stop.is_set():
                t = time.perf_counter()
                c.get("/metrics")
                c.get("/server_info")
                self.times.append(time.perf_counter() - t)
                self._stop.wait(max(0.0, self.interval - (time.perf_counter() - t)))

    def __enter__(self) -> "Scraper":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


def run_bench_serving(python: str, url: str, a, out: Path) -> dict:
    cmd = [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
           "--dataset-name", "random-ids", "--random-input-len", str(a.input_len),
           "--random-output-len", str(a.output_len), "--random-range-ratio", "1",
           "--num-prompts", str(a.prompts), "--max-concurrency", str(a.concurrency),
           "--tokenizer", a.tokenizer, "--disable-tqdm", "--output-file", str(out),
           # input_ids, as specmon sends: without it bench_serving decodes its random ids to text,
           # which a server re-tokenizes to another length (the sim counted 1,470 tokens a prompt)
           "--tokenize-prompt"]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    if p.returncode != 0:
        raise SystemExit(f"bench_serving failed ({p.returncode}):\n{p.stderr[-3000:]}")
    print(f"bench_serving: {time.monotonic() - t:.1f} s wall (its import alone takes several seconds)")
    return json.loads(out.read_text().strip().splitlines()[-1])


def run_specmon(url: str, a, out: Path) -> tuple[dict, RampDriver]:
    plan = RampPlan(levels=[a.concurrency], input_len=a.input_len, output_len=a.output_len,
                    level_duration_s=None, requests_per_level=a.prompts, settle_s=0.0)
    arm = ArmSpec(name="sim", url=url)
    ramp = RampDriver([arm], plan)
    live = LiveSession([arm], interval=1.0, out_dir=out, ramp=ramp, isl=a.input_len, osl=a.output_len)
    asyncio.run(live.run(lambda e: None, asyncio.Event()))
    outs = [o for o in ramp.last_outcomes["sim"] if o.status == "ok"]
    toks = sum(o.completion_tokens for o in outs)
    span = max(o.wall(o.t_end) for o in outs) - min(o.t_sent_wall for o in outs)
    return {"completed": len(outs), "mean_ttft_ms": statistics.fmean(o.ttft for o in outs) * 1000,
            "output_throughput": toks / span,
            "mean_tpot_ms": statistics.fmean((o.e2e - o.ttft) / (o.completion_tokens - 1) for o in outs) * 1000,
            "mean_e2e_latency_ms": statistics.fmean(o.e2e for o in outs) * 1000}, ramp


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=480)  # the first wave of C is a smaller share
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--speed", type=float, default=1.0)  # 1: both sides timed by their own client clocks
    ap.add_argument("--profile", default="nvfp4-mtp")
    ap.add_argument("--sglang-python", default=str(realsglang.SGLANG_PYTHON))
    ap.add_argument("--tokenizer", default=str(realsglang.TINY_MODEL))
    ap.add_argument("--no-scrape", action="store_true",
                    help="do not scrape the server during bench_serving (specmon's run always does)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="specmon-vs-bench-"))
    with start_sim("--profile", a.profile, "--startup-s", "1", "--enable-metrics", speed=a.speed, timeout=120) as sim:
        m0 = server_means(sim.url)
        if a.no_scrape:
            bench = run_bench_serving(a.sglang_python, sim.url, a, tmp / "bench.jsonl")
        else:
            with Scraper(sim.url) as scraper:
                bench = run_bench_serving(a.sglang_python, sim.url, a, tmp / "bench.jsonl")
            print(f"scraped /metrics + /server_info at 1 Hz during bench_serving too: median "
                  f"{statistics.median(scraper.times) * 1000:.0f} ms a scrape")
        httpx.post(sim.url + "/flush_cache", timeout=60)  # neither run may find the other's prefixes
        m1 = server_means(sim.url)
        ours, ramp = run_specmon(sim.url, a, tmp / "session")
        m2 = server_means(sim.url)
    sb, so = delta_means(m0, m1, a.speed), delta_means(m1, m2, a.speed)
    print(f"C={a.concurrency}, {a.prompts} prompts, {a.input_len} in / {a.output_len} out, sim {a.profile} "
          f"--speed {a.speed:g}; wall-clock figures")
    print(f"{'metric':<26}{'bench_serving':>15}{'specmon':>12}{'ratio':>8}")
    for key, label in (("mean_ttft_ms", "mean TTFT (ms)"), ("output_throughput", "output tok/s"),
                       ("mean_tpot_ms", "mean TPOT (ms)"), ("mean_e2e_latency_ms", "mean e2e (ms)"),
                       ("completed", "completed")):
        b, o = bench.get(key), ours[key]
        print(f"{label:<26}{b:>15.2f}{o:>12.2f}{o / b:>8.3f}")
    # Each client against the server's own histograms over its own run: the server's pace can
    # differ between the runs on a busy machine (a heavier client leaves the simulator less CPU).
    print("server's own means during each run (sglang:*_seconds histograms, /speed):")
    print(f"{'':<26}{'bench run':>15}{'specmon run':>12}")
    for key, label in (("ttft_ms", "server TTFT (ms)"), ("itl_ms", "server ITL (ms)"), ("e2e_ms", "server e2e (ms)")):
        print(f"{label:<26}{sb[key]:>15.2f}{so[key]:>12.2f}")
    print(f"client/server TTFT: bench_serving {bench['mean_ttft_ms'] / sb['ttft_ms']:.3f}, "
          f"specmon {ours['mean_ttft_ms'] / so['ttft_ms']:.3f}; client TPOT/server ITL: bench_serving "
          f"{bench['mean_tpot_ms'] / sb['itl_ms']:.3f}, specmon {ours['mean_tpot_ms'] / so['itl_ms']:.3f}")
    pace = so["e2e_ms"] / sb["e2e_ms"]  # < 1: the server ran faster during specmon's run
    print(f"output tok/s ratio normalised by the server's pace (its own e2e ratio {pace:.3f}): "
          f"{ours['output_throughput'] / bench['output_throughput'] * pace:.3f}")
    cs = ramp.client_stats[-1]
    print(f"specmon client overhead: {cs.cpu_ms_per_1k_tokens} ms CPU per 1k tokens streamed "
          f"({cs.client_cpu_s} s for {cs.tokens} tokens); load-loop lag p50 {cs.lag_p50_s} s, "
          f"p99 {cs.lag_p99_s} s, max {cs.lag_max_s} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

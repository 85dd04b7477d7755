"""How close specmon's client-side figures are to the simulator's own clock, at one busy level.

Runs `specmon sim` (--enable-metrics, so the final meta_info carries the simulator's stamps)
and one ramp level of C streams through the real RampDriver + LiveSession. Ground truth per
request comes from the simulator's final meta_info, in simulated seconds:
  TTFT  = response_sent_to_client_ts - request_received_ts   (first token left the scheduler)
  e2e   = e2e_latency
  ITL   = (request_finished_ts - response_sent_to_client_ts) / (output_tokens - 1)  (mean per request)
  throughput = sum(output tokens) / (last request_finished_ts - first request_received_ts)
and specmon's figures are the client's. Prints the ratios; the target is within 2 % at C=150.

It runs the simulator at --speed 1 by default: against a sped-up simulator specmon times
requests by the simulator's own stamps (load/client.py RequestOutcome.timed), which would make
this comparison circular. At speed 1 every figure is this client's own wall-clock timing.

    .venv/bin/python benchmarks/ramp_fidelity.py [--concurrency 150] [--speed 1] [--duration 120]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from simproc import start_sim  # noqa: E402

from specmon.load.ramp import RampDriver  # noqa: E402
from specmon.model import ArmSpec, RampPlan  # noqa: E402
from specmon.session.live import LiveSession  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=150)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=120.0, help="simulated seconds of the level")
    ap.add_argument("--settle", type=float, default=20.0)
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--profile", default="nvfp4-mtp")
    a = ap.parse_args()
    with start_sim("--enable-metrics", "--profile", a.profile, "--max-running-requests", "256", "--startup-s", "1",
                   speed=a.speed, timeout=120) as sim:
        plan = RampPlan(levels=[a.concurrency], input_len=a.input_len, output_len=a.output_len,
                        level_duration_s=a.duration, settle_s=a.settle)
        arm = ArmSpec(name="sim", url=sim.url)
        ramp = RampDriver([arm], plan)
        out = Path(tempfile.mkdtemp(prefix="specmon-fidelity-"))
        live = LiveSession([arm], interval=1.0, out_dir=out, ramp=ramp, isl=a.input_len, osl=a.output_len)
        reason = asyncio.run(live.run(lambda e: None, asyncio.Event()))
    scale = ramp.scales["sim"]
    outs = [o for o in ramp.last_outcomes["sim"] if o.status == "ok" and o.final_meta]
    print(f"ramp: {reason}; {len(outs)} ok requests at C={a.concurrency}, sim --speed {a.speed:g} "
          f"(time_scale {scale:g}), {a.input_len} in / {a.output_len} out, profile {a.profile}")
    rows = []
    for o in outs:
        m = o.final_meta
        try:
            gt_ttft = m["response_sent_to_client_ts"] - m["request_received_ts"]
            gt_e2e = m["e2e_latency"]
            n = m["completion_tokens"]
            gt_itl = (m["request_finished_ts"] - m["response_sent_to_client_ts"]) / (n - 1)
        except (KeyError, TypeError, ZeroDivisionError):
            continue
        ev = o.token_events
        c_itl = (ev[-1][0] - ev[0][0]) / (n - 1) * scale
        rows.append((o.ttft * scale, gt_ttft, o.e2e * scale, gt_e2e, c_itl, gt_itl))
    if not rows:
        print("no request carried the simulator's stamps (is --enable-metrics on?)")
        return 1
    cols = list(zip(*rows))
    mean = statistics.fmean
    print(f"{'metric':<22}{'specmon':>12}{'sim truth':>12}{'ratio':>9}")
    worst = 0.0
    for name, c, g in (("TTFT mean (s)", cols[0], cols[1]), ("e2e mean (s)", cols[2], cols[3]),
                       ("ITL mean (s)", cols[4], cols[5])):
        r = mean(c) / mean(g)
        worst = max(worst, abs(r - 1))
        print(f"{name:<22}{mean(c):>12.4f}{mean(g):>12.4f}{r:>9.4f}")
    # Level throughput over the same requests: tokens / span, client clock vs simulator clock.
    toks = sum(o.completion_tokens for o in outs)
    c_span = (max(o.wall(o.t_end) for o in outs) - min(o.t_sent_wall for o in outs)) * scale
    g_span = max(o.final_meta["request_finished_ts"] for o in outs) - min(o.final_meta["request_received_ts"] for o in outs)
    r = (toks / c_span) / (toks / g_span)
    worst = max(worst, abs(r - 1))
    wall_span = c_span / scale
    print(f"simulator's own pace: {g_span / wall_span:.3f} simulated s per wall s (asked for {scale:g}); "
          "below the asked speed the sim fell behind (CPU-bound) and the nominal scale overstates durations")
    print(f"{'output tok/s':<22}{toks / c_span:>12.1f}{toks / g_span:>12.1f}{r:>9.4f}")
    # Per-request TTFT spread (how well each request is timed, not only the mean).
    d = sorted(abs(c - g) for c, g in zip(cols[0], cols[1]))
    print(f"per-request |TTFT error|: p50 {d[len(d) // 2] * 1000:.1f} ms, p99 {d[int(len(d) * 0.99)] * 1000:.1f} ms (sim s)")
    lc = ramp.client_stats[-1] if ramp.client_stats else {}
    print(f"client: {lc.get('cpu_ms_per_1k_tokens')} ms CPU per 1k tokens; event-loop lag p50 "
          f"{lc.get('lag_p50_s')} s, p99 {lc.get('lag_p99_s')} s, max {lc.get('lag_max_s')} s (wall)")
    print(f"worst deviation {worst:.2%} ({'within' if worst <= 0.02 else 'OUTSIDE'} 2 %) with the nominal scale")
    # The same comparison with the pace the simulator really kept (server_pace, what specmon
    # records per level and warns about): what is left is the client's own timing error plus
    # the simulator's HTTP layer delivering bytes after its scheduler stamped them.
    pace = ramp.client_stats[-1].get("server_pace", {}) or {}
    p = pace.get("sim")
    if p:
        k = p / scale
        worst2 = 0.0
        print(f"with the measured pace x{p:.3f}:")
        for name, c, g in (("TTFT mean (s)", cols[0], cols[1]), ("e2e mean (s)", cols[2], cols[3]),
                           ("ITL mean (s)", cols[4], cols[5])):
            r = mean(c) * k / mean(g)
            worst2 = max(worst2, abs(r - 1))
            print(f"{name:<22}{mean(c) * k:>12.4f}{mean(g):>12.4f}{r:>9.4f}")
        r = (toks / (c_span * k)) / (toks / g_span)
        worst2 = max(worst2, abs(r - 1))
        print(f"{'output tok/s':<22}{toks / (c_span * k):>12.1f}{toks / g_span:>12.1f}{r:>9.4f}")
        print(f"worst deviation {worst2:.2%} ({'within' if worst2 <= 0.02 else 'OUTSIDE'} 2 %) with the measured pace")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

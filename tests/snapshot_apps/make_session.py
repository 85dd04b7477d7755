"""Write a small session folder with the real SessionWriter, from events (no server).

Used where a test needs a fixed, fully known recording; recordings of real sim runs live in
tests/data/ too. With legacy=True (the default) the event log is left out, as in folders
recorded before it existed, so the replay rebuilds the events from the CSVs (the path every
folder in tests/data/ takes). Values follow a simple closed-loop picture (KV fills with C, queueing past the
knee) so the panes have something plausible to show; they are not a physical model.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specmon.model import (
    ArmInfo, ArmInfoUpdated, ArmSpec, KneeCalled, KneesSummary, LevelFinished, Marker, PredictedKnee, RampPlan,
    RampStarted, RequestFinished, RequestRecord, Sample, SamplesTick, SessionEnded, SessionStarted, LevelResult,
)
from specmon.session.folder import EVENTS_FILE, SessionWriter


def _finish(out: Path, w: SessionWriter, legacy: bool, last_ts: float) -> Path:
    # Legacy folders end when they were written, as the old recorder stamped its close; a new one
    # ends after its last row, so that a replay of it does not wait years of recorded time.
    w(SessionEnded(reason="done") if legacy else SessionEnded(reason="done", ts=last_ts + 1.0))
    if legacy:
        (out / EVENTS_FILE).unlink()
    return out

GIB = 1024**3
ARMS = [
    ("fp8-mtp", "http://127.0.0.1:30001", "EAGLE", 175_000, 18, 96 * GIB),
    ("nvfp4-mtp", "http://127.0.0.1:30002", "EAGLE", 260_000, 24, 96 * GIB),
    ("fp8-nospec", "http://127.0.0.1:30003", None, 175_000, 18, 96 * GIB),
]


def write(out: Path, n_arms: int = 3, levels=(4, 8, 16, 32), level_s: int = 6, t0: float = 1_700_000_000.0,
          legacy: bool = True) -> Path:
    w = SessionWriter(out)
    arms = ARMS[:n_arms]
    plan = RampPlan(levels=list(levels), level_duration_s=float(level_s), input_len=8192, output_len=1024)
    infos = {}
    for name, url, algo, pool, knee, mem in arms:
        infos[name] = ArmInfo(model="Qwen3-32B-FP8" if "fp8" in name else "Qwen3-32B-NVFP4",
                              speculative_algorithm=algo,
                              speculative_num_steps=3 if algo else None,
                              speculative_eagle_topk=1 if algo else None,
                              speculative_num_draft_tokens=4 if algo else None,
                              kv_capacity_tokens=pool, max_running_requests=48, tp_size=1)
    w(SessionStarted(mode="ramp", arms=[ArmSpec(name=a[0], url=a[1]) for a in arms], interval_s=1.0, ts=t0))
    for a in arms:
        w(ArmInfoUpdated(arm=a[0], info=infos[a[0]], ts=t0))
        pk = PredictedKnee(concurrency=a[3] / 9728, detail=f"KV {a[3]:,} / (8192+1024/2) tokens")
        w(KneeCalled(arm=a[0], definition="predicted", concurrency=pk.concurrency, detail=pk.detail, predicted=pk, ts=t0))
    w(RampStarted(plan=plan, time_scale={a[0]: 1.0 for a in arms}, workload={}, ts=t0))
    ts = t0
    rid = 0
    for li, c in enumerate(levels):
        for step in range(level_s):
            tick = []
            for ai, (name, url, algo, pool, knee, mem) in enumerate(arms):
                running = min(c, knee)
                queued = max(c - knee, 0)
                usage = min(running * 9728 / pool, 0.99)
                tok_s = running * (55.0 if algo else 30.0) * (1 - 0.3 * usage) + step
                ttft = 0.8 + (queued * 0.9)
                tick.append(Sample(
                    ts=ts + ai * 0.01, arm=name, up=True, source="metrics", running_reqs=running,
                    queued_reqs=queued, kv_used_tokens=int(usage * pool), kv_capacity_tokens=pool,
                    kv_usage=usage, gen_tok_s=tok_s, accept_length=(2.9 - 0.02 * c) if algo else None,
                    accept_rate=(0.62 - 0.004 * c) if algo else None, spec_enabled=algo is not None,
                    ttft_p50_s=ttft, ttft_p90_s=ttft * 1.4, queue_time_mean_s=queued * 0.9,
                    ttft_mean_s=ttft, gpu_mem_used_bytes=int(mem * 0.92), gpu_mem_total_bytes=mem,
                    gpu_power_w=300.0 + 5 * running, offered_concurrency=c, level=li))
            w(SamplesTick(samples=tick, ts=ts))
            ts += 1.0
        if li == 1:
            w(Marker(label="after level 2", ts=ts - 0.5))
        results = []
        for ai, (name, url, algo, pool, knee, mem) in enumerate(arms):
            for k in range(c):
                rid += 1
                w(RequestFinished(record=RequestRecord(
                    arm=name, level=li, offered_concurrency=c, request_id=str(rid), t_scheduled=ts - level_s + 0.1 * k,
                    t_start=ts - level_s + 0.1 * k, ttft_s=0.8, e2e_s=3.0, output_tokens=1024)))
            running = min(c, knee)
            results.append(LevelResult(
                arm=name, level=li, offered_concurrency=c, achieved_concurrency=c * 0.98, duration_s=level_s,
                ok=c * 2, failed=0, output_tok_s=running * (55.0 if algo else 30.0),
                per_user_tok_s=running * (55.0 if algo else 30.0) / c, ttft_p50_s=0.8 + max(c - knee, 0) * 0.9,
                ttft_p90_s=1.2, ttft_p99_s=1.9 + max(c - knee, 0), tpot_p50_s=0.018 if algo else 0.033,
                accept_length=(2.9 - 0.02 * c) if algo else None, kv_usage_max=min(running * 9728 / pool, 0.99),
                knee="queueing" if c == 32 and knee < 32 and li == len(levels) - 1 else None))
        w(LevelFinished(level=li, results=results, ts=ts))
    return _finish(out, w, legacy, ts)


# write_knees: one arm, three levels with known knees (worked by hand):
#   C    out tok/s (SE, 5 batches)  TTFT p50  SLO met/judged
#   10   1000 (100)                 1.0 s     100/100
#   20   1050 (100)                 1.3 s      99/100
#   40   1060 (100)                 4.0 s      60/100
# plateau: eta(20) = (50/10)/(1000/10) = 0.05, eta(40) = (10/20)/100 = 0.005, both < 0.15: knee C=10,
#   confirmed at level index 2; the SEs of 100 tok/s put eta's 95% bounds far above 0.15: within the noise.
# power X/TTFT: 1000, 808, 265: argmax C=10, falls twice after it: confirmed.
# SLO (TTFT<=2 s, TPOT<=30 ms): Wilson lower 95% of 100/100 ~0.97, of 99/100 ~0.956, of 60/100 ~0.52: C_SLO=20.
# goodput X x attainment: 1000, 1039.5, 636: peak C=20, one level after it only: not confirmed.
KNEES_LEVELS = [(10, 1000.0, 1.0, 100, 100), (20, 1050.0, 1.3, 100, 99), (40, 1060.0, 4.0, 100, 60)]


def write_knees(out: Path, arm: str = "a", t0: float = 1_700_000_000.0, legacy: bool = True) -> Path:
    w = SessionWriter(out)
    plan = RampPlan(levels=[c for c, *_ in KNEES_LEVELS], level_duration_s=3.0, input_len=100, output_len=10,
                    slo_ttft_s=2.0, slo_tpot_s=0.03)
    info = ArmInfo(model="m", speculative_algorithm=None, kv_capacity_tokens=100_000, max_running_requests=64)
    w(SessionStarted(mode="ramp", arms=[ArmSpec(name=arm, url="http://127.0.0.1:1")], interval_s=1.0, ts=t0))
    w(ArmInfoUpdated(arm=arm, info=info, ts=t0))
    w(RampStarted(plan=plan, time_scale={arm: 1.0}, workload={}, ts=t0))
    ts = t0
    for li, (c, x, ttft, n, met) in enumerate(KNEES_LEVELS):
        for _ in range(3):
            w(SamplesTick(samples=[Sample(ts=ts, arm=arm, up=True, running_reqs=c, queued_reqs=0, gen_tok_s=x,
                                          offered_concurrency=c, level=li)], ts=ts))
            ts += 1.0
        # What the ramp wrote for the plateau (by hand); the D3 knees are left for the readers to compute.
        knees = {arm: KneesSummary(plateau=10, plateau_confirmed_at_level=2, plateau_resolved=False,
                                   plateau_detail="throughput plateau at C=10 (test)")} if li == 2 else {}
        w(LevelFinished(level=li, knees=knees, ts=ts, results=[LevelResult(
                                    arm=arm, level=li, offered_concurrency=c, achieved_concurrency=float(c),
                                    duration_s=3.0, ok=n, failed=0, output_tok_s=x, per_user_tok_s=x / c,
                                    ttft_p50_s=ttft, output_tok_s_se=100.0, output_tok_s_batches=5,
                                    slo_n=n, slo_met=met, slo_attainment=met / n,
                                    knee="plateau" if li == 2 else None)]))
    return _finish(out, w, legacy, ts)


if __name__ == "__main__":
    write(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3)

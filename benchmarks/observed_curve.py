"""What the observed knee costs a live session: per tick, one Sample added to each worker's curve,
and every 5 s every worker's knee read (analysis/observed.py). Prints the CPU time per tick at
64 workers (and 500) after an hour of varied traffic has filled their curves.

    .venv/bin/python benchmarks/observed_curve.py
"""

from __future__ import annotations

import random
import time

from specmon.analysis.observed import ObservedCurves
from specmon.model import ArmInfo, Sample

KNEE_EVERY = 5  # ticks (live.py OBSERVED_EVERY_S at 1 s)


def samples(workers: int, tick: int, rng: random.Random) -> list[Sample]:
    out = []
    for w in range(workers):
        running = max(0, int(30 + 25 * rng.random() + 20 * ((tick // 300 + w) % 4 - 1.5)))
        out.append(Sample(ts=float(tick), arm=f"w{w}", up=True, source="metrics", running_reqs=running,
                          queued_reqs=max(0, running - 48), gen_tok_s=40.0 * min(running, 40),
                          kv_usage=min(1.0, running / 60), ttft_mean_s=0.2, queue_time_mean_s=0.02))
    return out


def run(workers: int, warm_ticks: int = 3600, measured: int = 300) -> tuple[float, float]:
    rng = random.Random(1)
    curves = ObservedCurves()
    info = ArmInfo(max_running_requests=48)
    for t in range(warm_ticks):
        for s in samples(workers, t, rng):
            curves.add(s, info)
    ticks = [samples(workers, warm_ticks + t, rng) for t in range(measured)]
    start = time.process_time()
    for t, batch in enumerate(ticks):
        for s in batch:
            curves.add(s, info)
        if t % KNEE_EVERY == 0:
            curves.knees()
    per_tick = (time.process_time() - start) / measured
    bins = max(len(c.bins) for c in curves.curves.values())
    return per_tick, bins


if __name__ == "__main__":
    for workers in (64, 500):
        per_tick, bins = run(workers)
        print(f"{workers} workers: {per_tick * 1e3:.2f} ms of CPU per 1 s tick "
              f"({per_tick * 100:.2f}% of a core; knees read every {KNEE_EVERY} ticks; {bins} bins a curve at most)")

"""The specmon side of peers_client.py: one ramp level in this process, as `specmon ramp --headless` runs it.

Its own small script, so the process whose CPU is measured imports and compiles only what the
`specmon` command does: run as peers_client.py itself, the child compiled that 600-line script
(a __main__ is never cached) and imported the harness's own modules, ~20 ms of a ~1.5 s run
that were the benchmark's, not the client's.

    python benchmarks/specmon_client_child.py URL C N INPUT_LEN OUTPUT_LEN OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def specmon_child(url: str, c: int, n: int, isl: int, osl: int, out: str) -> int:
    """One ramp level at C through specmon's own RampDriver + LiveSession, run by run_headless
    (what `specmon ramp --headless` runs: scraping at 1 Hz, writing its session folder, its
    lines to /dev/null here), then each request's raw stamps to `out`, as wall-clock seconds."""
    from specmon.headless import run_headless
    from specmon.model import ArmSpec, LoadClientStats, RampPlan
    from specmon.session.live import LiveSession
    from specmon.session.ramp import RampDriver

    started = time.process_time()  # the interpreter and its imports: the only thread so far
    plan = RampPlan(levels=[c], input_len=isl, output_len=osl, level_duration_s=None, requests_per_level=n,
                    settle_s=0.0)
    arm = ArmSpec(name="sim", url=url)
    ramp = RampDriver([arm], plan)
    folder = Path(out).parent / "specmon-session"
    live = LiveSession([arm], interval=1.0, out_dir=folder, ramp=ramp, isl=isl, osl=osl)
    with open(os.devnull, "w") as devnull:
        run_headless(live, out=devnull)
    rows = []
    for o in ramp.last_outcomes["sim"]:
        ev = o.token_events
        rows.append({"rid": o.rid, "status": o.status, "tokens": o.completion_tokens or 0,
                     "sent": o.t_sent_wall, "written": o.wall(o.t_written) if o.t_written else None,
                     "first": o.wall(ev[0][0]) if ev else None, "last": o.wall(ev[-1][0]) if ev else None,
                     "end": o.wall(o.t_end) if o.t_end else None})
    # no level finished: every figure unknown
    cs = ramp.client_stats[-1] if ramp.client_stats else LoadClientStats(level=0, offered_concurrency=c)
    lag = cs.lag_p99_s
    # Where the process's CPU went, in seconds: start-up (interpreter and imports), the session's
    # thread after it (scrapes, records, CSV rows, the level's figures), the load thread over
    # its level (connections, requests, reads: the ramp's own reading of its clock), and every
    # other thread (host readings, the resolver) with the load thread's time outside its level.
    main_s, total_s, load_s = time.thread_time(), time.process_time(), cs.client_cpu_s or 0.0
    split = {"start_up": started, "session_thread": main_s - started, "load_thread": load_s,
             "other": total_s - main_s - load_s}
    Path(out).write_text(json.dumps({"requests": rows, "client_cpu_ms_per_1k": cs.cpu_ms_per_1k_tokens,
                                     "lag_p99_ms": None if lag is None else round(lag * 1000, 2),
                                     "connect_s": cs.connect_s,
                                     "cpu_split_s": {k: round(v, 3) for k, v in split.items()}}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 7:
        print("usage: specmon_client_child.py URL C N INPUT_LEN OUTPUT_LEN OUT_JSON", file=sys.stderr)
        sys.exit(2)
    url, c, n, isl, osl, out = sys.argv[1:]
    from specmon.cli import exit_now

    exit_now(specmon_child(url, int(c), int(n), int(isl), int(osl), out))  # as the `specmon` command ends

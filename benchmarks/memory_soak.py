"""Memory over a long session: specmon's RSS sampled while it runs, to show it flat.

    .venv/bin/python benchmarks/memory_soak.py attach [--seconds 180] [--interval 0.05] [--ring N]
    .venv/bin/python benchmarks/memory_soak.py demo [--seconds 600]

attach: `specmon attach URL --headless` (the real command, its own process) against one simulated
arm kept a little busy, at a short interval: many ticks in little time (a 24-hour session at 1 Hz
is 86,400 ticks; at 0.05 s the scrapes keep up to about 18 a second here). What grows with ticks
is the in-memory sample history, a ring of session.live.SAMPLES_KEPT (14,400) per arm, and for
the first 30 s the scrape windows (30 s of snapshots: bounded by time, not ticks). To see the
ring full and then flat within a short run, `--ring N` sets it to N in the measured process
(everything else unchanged). The RSS at the end minus the RSS once both are full is the growth
that is neither.

demo: `specmon demo --headless` (two arms ramped with 8.8K-token prompts): the prompt cache's
share of the RSS.

Each prints one row per sample (elapsed, ticks seen, RSS) and a summary. Measured here (2 cores,
shared): attach with the real ring, 960 s, 16,986 ticks: 81 MiB at 30 s, about 2 KB a tick while
the ring fills (a Sample), full at 14,835 ticks with 121.3 MiB, then 121.3-121.4 MiB for the last
2,151 ticks; with --ring 1000, 540 s, 9,663 ticks: 86.3 MiB when full, 92.9 MiB at the end, in
two steps of 1-2 MiB (Python's traced heap stayed 6.5-8.9 MiB: the allocator, not objects).
The demo, 2,378 / 2,361 requests: 479 MiB at its peak with prompts kept as lists of ints, 159 MiB
with the int32 cache (64 MiB at most; about 40 MiB for the ~1,200 prompts asked for).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from simproc import start_sim  # noqa: E402

MIB = 1024 * 1024
# The measured process: specmon's own CLI, with the sample ring resized when asked.
BOOT = """
import sys
ring = int(sys.argv[1])
if ring:
    import specmon.session.live as live
    live.SAMPLES_KEPT = ring
from specmon.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def keep_busy(url: str, stop: threading.Event, streams: int) -> None:
    """A small closed loop, so /metrics carries populated histograms (bounded by `stop`)."""
    def loop() -> None:
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                try:
                    c.post(url + "/generate", json={"input_ids": [5] * 512,
                                                    "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}})
                except httpx.HTTPError:
                    time.sleep(0.1)
    for _ in range(streams):
        threading.Thread(target=loop, daemon=True).start()


def watch(cmd: list[str], seconds: float, every: float) -> list[tuple[float, int, float]]:
    """Run cmd, count its stdout lines (headless prints one per tick), sample its RSS."""
    err = tempfile.NamedTemporaryFile(prefix="specmon-soak-", suffix=".stderr", delete=False)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO)
    lines = [0]

    def count() -> None:
        for _ in proc.stdout:
            lines[0] += 1
    threading.Thread(target=count, daemon=True).start()
    ps = psutil.Process(proc.pid)
    rows: list[tuple[float, int, float]] = []
    t0 = time.monotonic()
    print(f"{'t_s':>7} {'ticks':>7} {'rss_mib':>8}")
    try:
        while proc.poll() is None and time.monotonic() - t0 < seconds + 60:
            time.sleep(every)
            try:
                rss = ps.memory_info().rss / MIB
            except psutil.NoSuchProcess:
                break
            if proc.poll() is not None:  # ended meanwhile (a zombie reads 0)
                break
            rows.append((time.monotonic() - t0, lines[0], rss))
            print(f"{rows[-1][0]:7.1f} {rows[-1][1]:7d} {rss:8.1f}", flush=True)
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(30)
        err.close()
    if proc.returncode:
        tail = Path(err.name).read_text(errors="replace").strip().splitlines()[-5:]
        print(f"exit {proc.returncode}; its stderr ({err.name}) ends:", *tail, sep="\n  ")
    return rows


def attach(a: argparse.Namespace) -> int:
    stop = threading.Event()
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=a.speed) as sim:
        keep_busy(sim.url, stop, a.busy)
        out = Path(tempfile.mkdtemp(prefix="specmon-soak-"))
        cmd = [sys.executable, "-c", BOOT, str(a.ring), "attach", sim.url, "--headless",
               "--interval", str(a.interval), "--duration", str(a.seconds), "--out", str(out / "s")]
        rows = watch(cmd, a.seconds, a.every)
        stop.set()
    if not rows:
        print("no sample: the attach process ended at once")
        return 1
    ticks = rows[-1][1]
    print(f"\n{ticks} ticks in {rows[-1][0]:.0f} s ({ticks / rows[-1][0]:.1f}/s at --interval {a.interval}); "
          f"RSS first {rows[0][2]:.1f} MiB, max {max(r[2] for r in rows):.1f}, last {rows[-1][2]:.1f}")
    ring = a.ring
    if not ring:
        import specmon.session.live as live

        ring = live.SAMPLES_KEPT
    # Bounded by time, not ticks: the scrape windows (30 s of snapshots) fill in the first 30 s.
    full = next((r for r in rows if r[1] >= ring + 60 and r[0] >= 35), None)
    if full is None:
        first, last = rows[len(rows) // 2], rows[-1]
        per = (last[2] - first[2]) * MIB / max(1, last[1] - first[1])
        print(f"the sample ring ({ring}) did not fill: second half {last[2] - first[2]:+.1f} MiB over "
              f"{last[1] - first[1]} ticks ({per:,.0f} bytes a tick while it fills)")
    else:
        after = [r for r in rows if r[0] >= full[0]]
        grow = rows[-1][2] - full[2]
        per_k = grow / max(1, rows[-1][1] - full[1]) * 1000 * 1024
        print(f"ring ({ring}) and windows full at {full[0]:.0f} s, {full[1]} ticks ({full[2]:.1f} MiB); after: "
              f"{rows[-1][1] - full[1]} ticks, RSS min {min(r[2] for r in after):.1f}, max {max(r[2] for r in after):.1f}, "
              f"last - full {grow:+.1f} MiB ({per_k:+.1f} KiB per 1,000 ticks)")
    return 0


def demo(a: argparse.Namespace) -> int:
    out = Path(tempfile.mkdtemp(prefix="specmon-soak-demo-"))
    rows = watch([sys.executable, "-m", "specmon", "demo", "--headless", "--out", str(out / "s")], a.seconds, a.every)
    if not rows:
        return 1
    at100 = min(rows, key=lambda r: abs(r[0] - 100))
    print(f"\ndemo RSS at {at100[0]:.0f} s: {at100[2]:.1f} MiB; max {max(r[2] for r in rows):.1f} MiB "
          f"over {rows[-1][0]:.0f} s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    at = sub.add_parser("attach")
    at.add_argument("--seconds", type=float, default=180.0)
    at.add_argument("--interval", type=float, default=0.05)
    at.add_argument("--ring", type=int, default=0, help="samples kept per arm in memory (0: SAMPLES_KEPT)")
    at.add_argument("--busy", type=int, default=2, help="streams kept running against the sim")
    at.add_argument("--speed", type=float, default=10.0)
    at.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    de = sub.add_parser("demo")
    de.add_argument("--seconds", type=float, default=600.0, help="upper bound; the demo ends by itself")
    de.add_argument("--every", type=float, default=5.0)
    a = ap.parse_args()
    return attach(a) if a.what == "attach" else demo(a)


if __name__ == "__main__":
    sys.exit(main())

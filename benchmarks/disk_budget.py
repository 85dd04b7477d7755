"""Disk budget of a long attach: bytes a session folder grows per worker per tick.

64 simulated SGLang workers (one `specmon sim --workers 64 --enable-metrics` process), watched by
`specmon attach URL... --no-discover --headless --interval 1` for --seconds; then every file of
the session folder is counted. "Before" is the same folder with its event log written as it was
before ticks were stored as their changes (format 1: every tick's samples again in full as JSON),
rebuilt from the recorded log itself, so both figures come from one recording.

    .venv/bin/python benchmarks/disk_budget.py [--workers 64] [--seconds 60] [--busy 4]

--busy workers get a small closed loop of requests, so some figures move as in production.

Measured (2 shared cores under a load average of ~11, --busy 0, 60 s): steady growth 1,487 B per
worker-tick before (events.jsonl 1,314) and 306 after (events.jsonl 133, samples.csv 171,
gpus.csv 2): a week of 64 workers at 1 s 57.5 GB before, 11.8 GB after. On that machine some
scrapes answer late, and a late reading's reason is most of what events.jsonl still holds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from prometheus_fleet import free_base_port, keep_busy, start_group, stop_group, wait_until  # noqa: E402

from specmon.model import SamplesTick  # noqa: E402
from specmon.session import codec  # noqa: E402
from specmon.session.replay import read_event_log  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--busy", type=int, default=4)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="specmon-disk-"))
    base = free_base_port(args.workers)
    urls = [f"http://127.0.0.1:{base + i}" for i in range(args.workers)]
    sim = start_group([sys.executable, "-m", "specmon", "sim", "--workers", str(args.workers), "--port", str(base),
                       "--enable-metrics"], tmp / "sim.log")
    stop = threading.Event()
    try:
        wait_until("the simulated workers", lambda: all(
            httpx.get(u + "/health", timeout=2).status_code == 200 for u in (urls[0], urls[-1])), 120)
        for u in urls[:args.busy]:
            keep_busy(u, stop)
        out = tmp / "s"
        subprocess.run([sys.executable, "-m", "specmon", "attach", *urls, "--no-discover", "--headless",
                        "--interval", "1", "--duration", str(args.seconds), "--out", str(out)],
                       cwd=str(REPO), stdout=subprocess.DEVNULL, check=True, timeout=args.seconds + 120)
    finally:
        stop.set()
        stop_group(sim)

    events = read_event_log(out / "events.jsonl")
    ticks = [e for e in events if isinstance(e, SamplesTick)]
    worker_ticks = sum(len(t.samples) for t in ticks)
    sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
    after = sum(sizes.values())
    full_log = sum(len(codec.encode_event(e).encode()) + 1 for e in events)
    before = after - sizes["events.jsonl"] + full_log
    print(f"{args.workers} workers, {len(ticks)} ticks, {worker_ticks} worker-ticks ({args.busy} busy)")
    for name, n in sorted(sizes.items()):
        print(f"  {name:24s} {n:>10,d} B  {n / worker_ticks:7.1f} B/worker-tick")
    print(f"whole folder, before (every tick in full in events.jsonl): {before / worker_ticks:.0f} B per worker-tick")
    print(f"whole folder, after  (ticks as their changes):              {after / worker_ticks:.0f} B per worker-tick")

    # The steady growth a long attach sees: what the files gain after the first 10 ticks
    # (session.json, the start's server info and the first full tick are paid once).
    cut = ticks[min(10, len(ticks) - 1)].ts
    late_ticks = [t for t in ticks if t.ts > cut]
    late_wt = sum(len(t.samples) for t in late_ticks)
    grown = {name: csv_bytes_after(out / name, cut) for name in sizes if name.endswith(".csv")}
    log_after = log_before = 0
    for line, e in zip(log_lines(out / "events.jsonl"), events_with_lines(out / "events.jsonl")):
        if e is not None and e.ts > cut:
            log_after += len(line) + 1
            log_before += len(codec.encode_event(e).encode()) + 1
    steady_after = sum(grown.values()) + log_after
    steady_before = sum(grown.values()) + log_before
    print(f"steady growth over {len(late_ticks)} ticks: before {steady_before / late_wt:.0f} B per worker-tick "
          f"(events.jsonl {log_before / late_wt:.0f}), after {steady_after / late_wt:.0f} "
          f"(events.jsonl {log_after / late_wt:.0f}, "
          + ", ".join(f"{k} {v / late_wt:.0f}" for k, v in sorted(grown.items())) + ")")
    print(f"a week of 64 workers at 1 s: {steady_after / late_wt * 64 * 7 * 86400 / 1e9:.1f} GB "
          f"(before: {steady_before / late_wt * 64 * 7 * 86400 / 1e9:.1f} GB)")


def csv_bytes_after(path: Path, cut: float) -> int:
    """Bytes of a CSV's rows stamped after `cut` (its first cell is the ts)."""
    n = 0
    with open(path, "rb") as f:
        next(f, None)
        for line in f:
            try:
                if float(line.split(b",", 1)[0]) > cut:
                    n += len(line)
            except ValueError:
                pass
    return n


def log_lines(path: Path) -> list[bytes]:
    return [x for x in path.read_bytes().split(b"\n") if x.strip()]


def events_with_lines(path: Path) -> list:
    """Each line's event (None for the format line), in the log's order."""
    dec = codec.EventLogDecoder()
    return [dec.decode(x.decode()) for x in log_lines(path)]

if __name__ == "__main__":
    main()

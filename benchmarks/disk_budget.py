"""Disk budget of a long attach: bytes a session folder grows per worker per tick.

64 simulated SGLang workers (one `specmon sim --workers 64 --enable-metrics` process), watched by
`specmon attach URL... --no-discover --headless --interval 1` for --seconds; then every file of
the session folder is counted. "Before" is the same folder with its event log written as it was
before ticks were stored as their changes (format 1: every tick's samples again in full as JSON),
rebuilt from the recorded log itself, so both figures come from one recording.

    .venv/bin/python benchmarks/disk_budget.py [--workers 64] [--seconds 60] [--busy 4] [--rotate 1h]

--busy workers get a small closed loop of requests, so some figures move as in production.
--rotate is passed to attach: a short one (40s) closes and compresses segments within the run,
and the closed segments are counted as they lie on disk (gzip).

Measured 2026-12-05 (2 shared cores, load average ~3, --workers 64 --seconds 150 --busy 4
--rotate 40s): the open (plain) segment grows 298 B per worker-tick (events.jsonl 108,
samples.csv 183, gpus.csv 7; before ticks were stored as their changes: 1,583); closed segments
on disk 22 B per worker-tick (361 plain: 40-tick segments each repeat a full tick and the
start); the whole folder as on disk after 150 s, 108 B per worker-tick. A week of 64 workers at
1 s: 0.87 GB compressed, 11.5 GB if never rotated (61.3 GB before the change encoding). Earlier
(unrotated, load ~11, 60 s): 1,487 -> 306 B per worker-tick.
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
from specmon.session import codec, segments  # noqa: E402
from specmon.session.replay import read_event_log  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--rotate", default="1h",
                    help="attach --rotate (a short one, e.g. 20s, shows the compressed closed segments within the run)")
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
                        "--interval", "1", "--duration", str(args.seconds), "--out", str(out),
                        "--rotate", args.rotate],
                       cwd=str(REPO), stdout=subprocess.DEVNULL, check=True, timeout=args.seconds + 180)
    finally:
        stop.set()
        stop_group(sim)

    events = read_event_log(out / "events.jsonl")
    ticks = [e for e in events if isinstance(e, SamplesTick)]
    worker_ticks = sum(len(t.samples) for t in ticks)
    sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
    after = sum(sizes.values())
    full_log = sum(len(codec.encode_event(e).encode()) + 1 for e in events)
    log_on_disk = sum(n for name, n in sizes.items() if name.startswith("events."))
    before = after - log_on_disk + full_log
    print(f"{args.workers} workers, {len(ticks)} ticks, {worker_ticks} worker-ticks ({args.busy} busy), "
          f"--rotate {args.rotate}")
    for name, n in sorted(sizes.items()):
        print(f"  {name:28s} {n:>10,d} B  {n / worker_ticks:7.1f} B/worker-tick")
    print(f"whole folder, before (every tick in full in events.jsonl, unrotated): {before / worker_ticks:.0f} B per worker-tick")
    print(f"whole folder, as on disk:                                          {after / worker_ticks:.0f} B per worker-tick")

    # Closed segments as they lie on disk (gzip), each file of a segment over that segment's
    # worker-ticks; the first segment, which also holds the start, is left out of the steady figure.
    closed = segments.closed_segments(out, "events.jsonl")
    if len(closed) > 1:
        seg_bytes = seg_plain = seg_wt = 0
        for n in list(closed)[1:]:
            seg_wt += sum(len(e.samples) for e in segment_events(closed[n]) if isinstance(e, SamplesTick))
            for name in segments.ROTATED_FILES:
                p = segments.closed_segments(out, name).get(n)
                if p is not None:
                    seg_bytes += p.stat().st_size
                    with segments.open_text(p) as f:
                        seg_plain += len(f.read().encode())
        print(f"closed segments 2-{max(closed)} ({seg_wt} worker-ticks): {seg_bytes / seg_wt:.0f} B per worker-tick "
              f"as on disk (gzip), {seg_plain / seg_wt:.0f} B plain (what the open segment grows by); "
              f"a week of 64 workers at 1 s: {seg_bytes / seg_wt * 64 * 7 * 86400 / 1e9:.2f} GB compressed")

    # The steady growth of the open segment (plain): what the files gain after the first 10 ticks
    # of it (session.json, the start's server info and the first full tick are paid once).
    open_ticks = [e for e in segment_events(out / "events.jsonl") if isinstance(e, SamplesTick)]
    if len(open_ticks) > 12:
        cut = open_ticks[10].ts
        late_ticks = [t for t in open_ticks if t.ts > cut]
        late_wt = sum(len(t.samples) for t in late_ticks)
        grown = {name: csv_bytes_after(out / name, cut) for name in ("samples.csv", "gpus.csv")}
        log_after = log_before = 0
        for line, e in zip(log_lines(out / "events.jsonl"), events_with_lines(out / "events.jsonl")):
            if e is not None and e.ts > cut:
                log_after += len(line) + 1
                log_before += len(codec.encode_event(e).encode()) + 1
        steady_after = sum(grown.values()) + log_after
        steady_before = sum(grown.values()) + log_before
        print(f"open segment, steady growth over {len(late_ticks)} ticks: before {steady_before / late_wt:.0f} B per "
              f"worker-tick (events.jsonl {log_before / late_wt:.0f}), after {steady_after / late_wt:.0f} "
              f"(events.jsonl {log_after / late_wt:.0f}, "
              + ", ".join(f"{k} {v / late_wt:.0f}" for k, v in sorted(grown.items())) + ")")
        print(f"a week of 64 workers at 1 s, never rotated: {steady_after / late_wt * 64 * 7 * 86400 / 1e9:.1f} GB "
              f"(before: {steady_before / late_wt * 64 * 7 * 86400 / 1e9:.1f} GB)")


def segment_events(path: Path) -> list:
    """One segment's events alone (a closed one compressed or not, or the open file)."""
    dec = codec.EventLogDecoder()
    with segments.open_text(path) as f:
        return [e for x in f.read().split("\n") if x.strip() and (e := dec.decode(x)) is not None]


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

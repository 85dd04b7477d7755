"""Memory over a long session: specmon's own RSS (its process, not the servers it starts) over time.

    .venv/bin/python benchmarks/soak.py attach [--arms 3] [--ticks 86400] [--interval 0.02] [--tui]
    .venv/bin/python benchmarks/soak.py ramp   [--arms 3] [--levels 2,4,8,16] [--level-s 600] [--speed 20]
    .venv/bin/python benchmarks/soak.py demo | launch     (specmon demo --headless | launch layouts/demo.yaml)
    .venv/bin/python benchmarks/soak.py prompts           (CPU a prompt costs: made from the seed vs kept)

How a run stands for 24 hours. What a session accumulates grows with its ticks (a Sample a arm a
tick, the scrape windows) and with the requests a ramp sends; wall time itself holds nothing. A
24-hour session at 1 Hz is 86,400 ticks: `attach` runs specmon with a short --interval until it
has made --ticks of them (at 0.02 s, some 30-50 a second here: the 2-core machine, not the
interval, sets the pace). The scrape window is 30 s of scrapes (30 at 1 Hz); at a short interval
that would be 1,500 scrapes of each arm, so the measured process gets window_s = 30 x interval:
the 30 scrapes a 1 Hz session holds. The three simulators run at --speed 50, each kept busy by
one stream, so their /metrics carry moving counters and histograms (and a day of their simulated
time passes in under 30 wall minutes). `--tui` runs the same attach in the TUI, in tmux 160x48,
instead of headless. `ramp` drives `specmon ramp` on the three (levels of --level-s simulated
seconds at --speed): memory there is a level's requests and samples, which are let go when the
next level starts.

Prints a row per RSS sample (elapsed, ticks recorded in samples.csv, RSS MiB) and a summary: RSS
at start (first sample), once the buffers are full (the scrape windows: 60 ticks; a ramp: the
first level's end), at the end, the peak, and the slope after full (least squares over ticks,
KiB per 1,000 ticks and what it would add over 86,400).

Measured here, 2 shared cores with the load average at 7-30 from other work (and these runs
beside each other): every rate below is the machine's, not specmon's.
  attach, 3 arms headless, --interval 0.02, sims at x50: 86,656 ticks (a day at 1 Hz) in 4,202 s
    (20.6 a second); RSS 55.5 MiB at the start (309 ticks), 57.2 from ~6,800 ticks, 58.6 at
    ~19,000, 60.5 at 43,858, then 60.5-60.6 to the end (60.6 at 86,656): three steps of 1-2 MiB
    and flat for the second half; slope over the run +63 KiB per 1,000 ticks (+5.3 MiB a day).
    Traced in-process (tracemalloc, ticks 400 -> 1,400) what grew was the scrape windows'
    snapshots (bounded by time, more of them as the machine's tick rate rose), not a store.
  attach, 3 arms, the TUI in tmux 160x48, --interval 0.1: about 1 tick a second at load 20-29
    (the TUI cannot draw faster there): 61.3 MiB at 20 ticks, 84.0 at 257 (its charts' 600-point
    history still filling), stopped then; the TUI's cost over time is benchmarks/ui_cost.py's.
  ramp, 3 arms, levels 2,4,8,16 of 600 simulated s (1024 in / 512 out; the sims kept x11-14 of
    x20): 530 ticks, 4,449 requests, peak 74.3 MiB (at C=16).
  ramp, 3 arms, 12 levels at C=8 of 200 simulated s: 4,611 requests; RSS at each level's end
    59.2, 62.1, 62.8, 64.0, 64.0, 65.0, 65.1, 65.5, 65.2, 64.1, 65.0, 65.5 MiB: flat from the
    fourth level. (Python's own heap, traced in-process over 6 such levels, stayed 5.1-5.4 MiB;
    what RSS gains in the first levels is the C allocator's, not objects kept.)
  demo --headless: peak 82.7 MiB over 217 s (73.8 at 100 s).
  launch layouts/demo.yaml --headless: peak 86.4 MiB over 181 s.
  prompts (load 7): made from the seed 329 us (1,024 ids) / 3.3 ms (8,800); taken as kept
    1.6-2.6 us; the JSON body every request encodes 268 us / 2.1 ms.
Before this change (commit 541864a^): attach, 1 arm, 16,986 ticks: 121.3 MiB once the sample
ring (14,400 a arm, ~2 KB a sample) was full, ~2 KB a tick a arm until then; the demo 151.6 MiB
at its peak (int32 prompt cache, 64 MiB cap); 491 MiB with prompts kept as lists of ints (issue
17).
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers.simproc import start_sim  # noqa: E402

MIB = 1024 * 1024
LEVEL_CELL = 17  # samples.csv's `level` column (model.SAMPLE_COLUMNS)
FULL_TICKS = 60  # the scrape windows (30 scrapes) and anything sized by ticks at start are full by then
# The measured process: specmon's own CLI, its scrape window sized in scrapes as at 1 Hz.
BOOT = """
import sys
window = float(sys.argv[1])
if window:
    import specmon.session.live as live
    init = live.LiveSession.__init__
    def sized(self, *a, **kw):
        kw.setdefault("window_s", window)
        init(self, *a, **kw)
    live.LiveSession.__init__ = sized
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


class RowCounter:
    """samples.csv's rows, counted as the file grows (only the new bytes are read)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rows = path, 0, 0
        self.level: Optional[str] = None  # the ramp level of the newest row ("" outside a ramp)

    def count(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.rows
        end = data.rfind(b"\n") + 1  # a row being written is counted next time
        self.rows += data[:end].count(b"\n")
        self.offset += end
        last = data[:end].rstrip(b"\n").rsplit(b"\n", 1)[-1]
        if last and self.rows > 1:
            cells = next(csv.reader([last.decode("utf-8", "replace")]))
            if len(cells) > LEVEL_CELL and cells[1]:  # an arm's row, not a marker
                self.level = cells[LEVEL_CELL]
        return self.rows


def watch(pid: int, done, samples_csv: Path, arms: int, seconds: float, every: float,
          ticks_goal: Optional[int] = None, levels: Optional[dict] = None) -> list[tuple[float, int, float]]:
    """Sample pid's RSS every `every` s until done() or the time is up; ticks = samples.csv rows / arms."""
    ps = psutil.Process(pid)
    counter = RowCounter(samples_csv)
    rows: list[tuple[float, int, float]] = []
    t0 = time.monotonic()
    print(f"{'t_s':>7} {'ticks':>7} {'rss_mib':>8}", flush=True)
    while not done() and time.monotonic() - t0 < seconds:
        time.sleep(every)
        try:
            rss = ps.memory_info().rss / MIB
        except psutil.NoSuchProcess:
            break
        if done():  # ended meanwhile (a zombie reads 0)
            break
        ticks = max(0, counter.count() - 1) // max(1, arms)  # less the header
        rows.append((time.monotonic() - t0, ticks, rss))
        if levels is not None and counter.level:
            levels[counter.level] = rss  # the level's last reading so far
        print(f"{rows[-1][0]:7.1f} {ticks:7d} {rss:8.1f}", flush=True)
        if ticks_goal and ticks >= ticks_goal:
            break
    return rows


def summary(rows: list[tuple[float, int, float]], full_at: Optional[int] = None, slope: bool = True) -> None:
    if not rows:
        print("no RSS sample: the process ended at once")
        return
    full_ticks = FULL_TICKS if full_at is None else full_at
    full = next((r for r in rows if r[1] >= full_ticks), rows[-1])
    after = [r for r in rows if r[0] >= full[0]]
    t, n, rss = rows[-1]
    print(f"\n{n:,} ticks in {t:.0f} s ({n / max(t, 1e-9):.1f} a second)")
    print(f"RSS start {rows[0][2]:.1f} MiB; full ({full[1]:,} ticks, {full[0]:.0f} s) {full[2]:.1f}; "
          f"end {rss:.1f}; peak {max(r[2] for r in rows):.1f}; after full min {min(r[2] for r in after):.1f}")
    if not slope:  # a ramp that climbs to its top level: memory follows the load, not the ticks
        at100 = min(rows, key=lambda r: abs(r[0] - 100))
        print(f"RSS at {at100[0]:.0f} s: {at100[2]:.1f} MiB")
        return
    if len(after) >= 3 and after[-1][1] > after[0][1]:
        xs, ys = [r[1] for r in after], [r[2] for r in after]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0  # MiB a tick
        print(f"slope after full: {slope * 1024 * 1000:+.1f} KiB per 1,000 ticks "
              f"({slope * 86_400:+.1f} MiB over 86,400 ticks at that rate)")


def sims(stack: ExitStack, n: int, speed: float, busy: int, stop: threading.Event) -> list[str]:
    urls = []
    profiles = ["fp8-mtp", "nvfp4-mtp", "fp8-mtp"]
    for i in range(n):
        sim = stack.enter_context(start_sim("--enable-metrics", "--profile", profiles[i % 3], speed=speed))
        if busy:
            keep_busy(sim.url, stop, busy)
        urls.append(sim.url)
    return urls


def run_cli(args: list[str], window_s: float, out: Path, every: float, seconds: float, arms: int,
            ticks_goal: Optional[int] = None, tui: bool = False, full_at: Optional[int] = None,
            slope: bool = True) -> int:
    cmd = [sys.executable, "-c", BOOT, str(window_s), *args]
    err = out.parent / "specmon.stderr"
    if tui:
        return run_tui(cmd, out, every, seconds, arms, ticks_goal)
    levels: dict[str, float] = {}
    with open(err, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fh, cwd=REPO)
        try:
            rows = watch(proc.pid, lambda: proc.poll() is not None, out / "samples.csv", arms, seconds, every,
                         ticks_goal, levels)
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(60)
    summary(rows, full_at, slope)
    if levels:
        print("RSS at each level's last reading: " + ", ".join(f"L{k} {v:.1f}" for k, v in levels.items()) + " MiB")
    if proc.returncode not in (0, -15):
        tail = err.read_text(errors="replace").strip().splitlines()[-5:]
        print(f"exit {proc.returncode}; its stderr ({err}) ends:", *tail, sep="\n  ")
    return 0 if rows else 1


def run_tui(cmd: list[str], out: Path, every: float, seconds: float, arms: int, ticks_goal: Optional[int]) -> int:
    """The same command in the TUI, in a tmux server of its own (160x48)."""
    if shutil.which("tmux") is None:
        print("tmux is not installed: the TUI's cost is covered by benchmarks/ui_cost.py")
        return 1
    sock = str(out.parent / "tmux.sock")
    line = " ".join(f"'{c}'" if " " in c or "\n" in c else c for c in cmd)
    script = out.parent / "run.sh"
    script.write_text(f"cd {REPO}\nexec {line} 2>{out.parent / 'specmon.stderr'}\n")
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", "160", "-y", "48", f"sh {script}"], check=True)
    try:
        pid = int(subprocess.run(["tmux", "-S", sock, "display", "-p", "#{pane_pid}"],
                                 capture_output=True, text=True, check=True).stdout.strip())
        proc = psutil.Process(pid)
        rows = watch(pid, lambda: not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE,
                     out / "samples.csv", arms, seconds, every, ticks_goal)
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
    summary(rows)
    return 0 if rows else 1


def attach(a: argparse.Namespace) -> int:
    stop = threading.Event()
    root = Path(tempfile.mkdtemp(prefix="specmon-soak-"))
    seconds = a.seconds or a.ticks * a.interval * 4 + 120
    with ExitStack() as stack:
        urls = sims(stack, a.arms, a.speed, a.busy, stop)
        args = ["attach", *urls, "--interval", str(a.interval), "--out", str(root / "s")]
        if not a.tui:
            args += ["--headless", "--duration", str(seconds)]
        print(f"specmon attach, {a.arms} arms, --interval {a.interval}, scrape window {30 * a.interval:g} s "
              f"(30 scrapes), until {a.ticks:,} ticks or {seconds:.0f} s; sims at x{a.speed:g}"
              + (" (TUI in tmux 160x48)" if a.tui else " (headless)"), flush=True)
        rc = run_cli(args, 30 * a.interval, root / "s", a.every, seconds, a.arms, a.ticks, tui=a.tui)
        stop.set()
    return rc


def ramp(a: argparse.Namespace) -> int:
    stop = threading.Event()
    root = Path(tempfile.mkdtemp(prefix="specmon-soak-ramp-"))
    levels = [int(x) for x in a.levels.split(",")]
    with ExitStack() as stack:
        urls = sims(stack, a.arms, a.speed, 0, stop)
        args = ["ramp", *urls, "--levels", a.levels, "--level-duration", str(a.level_s), "--settle", str(a.level_s / 10),
                "--input-len", str(a.input_len), "--output-len", str(a.output_len), "--interval", str(a.interval),
                "--headless", "--out", str(root / "s")]
        wall = len(levels) * a.level_s / a.speed
        print(f"specmon ramp, {a.arms} arms, levels {a.levels} of {a.level_s:g} simulated s "
              f"({len(levels) * a.level_s / 3600:.1f} simulated hours, ~{wall:.0f} s of wall at x{a.speed:g}), "
              f"{a.input_len} in / {a.output_len} out, --interval {a.interval}", flush=True)
        rc = run_cli(args, 30 * a.interval, root / "s", a.every, wall * 4 + 300, a.arms, slope=False)
    print(f"session folder: {root / 's'}")
    return rc


def demo(a: argparse.Namespace, launch: bool) -> int:
    root = Path(tempfile.mkdtemp(prefix="specmon-soak-demo-"))
    args = (["launch", str(REPO / "layouts" / "demo.yaml")] if launch else ["demo"]) + [
        "--headless", "--out", str(root / "s")]
    print(f"specmon {' '.join(args[:2] if launch else args[:1])} --headless (two simulated arms, 8.8K-token prompts)",
          flush=True)
    return run_cli(args, 0.0, root / "s", a.every, a.seconds, 2, slope=False)


def prompts(a: argparse.Namespace) -> int:
    """What a prompt costs the load client's thread: made from the seed (the first arm to ask,
    or one that fell past the cache) vs taken as kept (every other arm), and the JSON body every
    request encodes either way; at C=1,000 a level sends thousands of prompts a minute."""
    import json

    from specmon.load.workload import Workload

    def best(f, n: int) -> float:
        f()
        out = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                f()
            out.append((time.perf_counter() - t) / n)
        return min(out) * 1e6

    print(f"{'input_len':>9} {'made_us':>8} {'kept_us':>8} {'json_us':>8}")
    for n in (1024, 8800):
        w = Workload(input_len=n, seed=42)
        i = [0]

        def made() -> None:
            i[0] += 1
            w.prompt(i[0])

        kept = Workload(input_len=n, seed=42)
        kept.sharers = 10**9
        kept.cache_bytes = 1 << 40
        kept.prompt(0)
        ids = kept.prompt(0).input_ids
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 256, "ignore_eos": True, "temperature": 0.0},
                "stream": True}
        print(f"{n:9d} {best(made, 200):8.0f} {best(lambda: kept.prompt(0), 2000):8.1f} "
              f"{best(lambda: json.dumps(body).encode(), 200):8.0f}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    at = sub.add_parser("attach", help="3 simulated arms watched headless (or --tui) for --ticks ticks")
    at.add_argument("--arms", type=int, default=3)
    at.add_argument("--ticks", type=int, default=86_400, help="ticks to make (86,400: a day at 1 Hz)")
    at.add_argument("--interval", type=float, default=0.02)
    at.add_argument("--seconds", type=float, default=0.0, help="wall limit (default: ticks x interval x 4 + 120)")
    at.add_argument("--speed", type=float, default=50.0, help="the simulators' --speed")
    at.add_argument("--busy", type=int, default=1, help="streams kept running against each simulator")
    at.add_argument("--tui", action="store_true", help="the TUI in tmux 160x48 instead of --headless")
    at.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    rp = sub.add_parser("ramp", help="specmon ramp on 3 simulated arms")
    rp.add_argument("--arms", type=int, default=3)
    rp.add_argument("--levels", default="2,4,8,16")
    rp.add_argument("--level-s", type=float, default=600.0, help="simulated seconds a level")
    rp.add_argument("--speed", type=float, default=20.0)
    rp.add_argument("--input-len", type=int, default=1024)
    rp.add_argument("--output-len", type=int, default=512)
    rp.add_argument("--interval", type=float, default=0.1)
    rp.add_argument("--every", type=float, default=5.0)
    for name in ("demo", "launch"):
        de = sub.add_parser(name, help=f"specmon {name} --headless" + (" layouts/demo.yaml" if name == "launch" else ""))
        de.add_argument("--seconds", type=float, default=900.0, help="upper bound; it ends by itself")
        de.add_argument("--every", type=float, default=2.0)
    sub.add_parser("prompts", help="CPU of a prompt: made from the seed vs kept")
    a = ap.parse_args()
    if a.what == "attach":
        return attach(a)
    if a.what == "ramp":
        return ramp(a)
    if a.what == "prompts":
        return prompts(a)
    return demo(a, launch=a.what == "launch")


if __name__ == "__main__":
    sys.exit(main())

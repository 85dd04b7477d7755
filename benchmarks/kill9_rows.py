"""How many finished requests a kill -9 of `specmon ramp --headless` loses from requests.csv.

One `specmon sim --enable-metrics` serves every trial. Per trial: start `specmon ramp URL
--headless` against it, wait until the ramp's first level has started (events.jsonl), let it run
a random while, kill -9 it, wait until the simulator is idle, then compare the simulator's own
count of finished requests over the trial (the increase of its sglang:num_requests_total) with
the `ok` rows in requests.csv. A request the simulator finished but the client had not yet read
to its end was in flight when the kill came, so the rows lost must be at most the requests in
flight: C of the level that was running (read from the folder's last LevelStarted event).

A row is written by the session's loop, which a request's end reaches within milliseconds
(session/ramp/sending.py); while that loop is busy (a /metrics parse takes 10-40 ms on a loaded 2-core
box) the requests that end wait for it. So the bound holds while a request lasts longer than
those pauses: the default (--speed 10, --output-len 128) gives ~0.2 s per request; at
--speed 50 --output-len 16 (~10 ms per request, ~400 finishing a second) a trial can lose a few
more than C.

    .venv/bin/python benchmarks/kill9_rows.py [--trials 20] [--speed 50] [--max-wait 4]

Prints one line per trial and a summary; exit status 0 when no trial lost more than C rows.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.simproc import REPO, start_sim  # noqa: E402

_COUNTER = re.compile(rb"^sglang:num_requests_total(?:\{[^}]*\})? ([0-9.e+]+)$", re.M)
_GAUGE = rb"^sglang:%s(?:\{[^}]*\})? ([0-9.e+]+)$"


def _metrics(url: str) -> bytes:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return r.read()


def finished_count(url: str) -> int:
    """The simulator's finished requests so far (sum over its label sets)."""
    return int(sum(float(m) for m in _COUNTER.findall(_metrics(url))))


def wait_idle(url: str, timeout: float = 30.0) -> None:
    """Until the simulator runs and queues nothing, twice in a row 0.2 s apart."""
    deadline = time.monotonic() + timeout
    calm = 0
    while time.monotonic() < deadline:
        text = _metrics(url)
        busy = sum(float(v) for name in (b"num_running_reqs", b"num_queue_reqs")
                   for v in re.findall(_GAUGE % name, text, re.M))
        calm = calm + 1 if busy == 0 else 0
        if calm >= 2:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{url} still busy after {timeout} s")


def last_level_c(folder: Path) -> Optional[int]:
    c = None
    path = folder / "events.jsonl"
    if not path.exists():
        return None
    for line in path.read_text(errors="replace").splitlines():
        if '"LevelStarted"' in line:
            try:
                c = json.loads(line)["offered_concurrency"]
            except (json.JSONDecodeError, KeyError):
                pass  # a line cut by the kill
    return c


def ok_rows(folder: Path) -> tuple[int, int]:
    """(ok rows, all rows) in requests.csv."""
    path = folder / "requests.csv"
    if not path.exists():
        return 0, 0
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return sum(1 for r in rows if r.get("status") == "ok"), len(rows)


@dataclass
class Trial:
    after_s: float  # how long after the first level started the kill came
    c: Optional[int]  # the level running then
    sim_finished: int
    rows_ok: int
    rows: int

    @property
    def lost(self) -> int:
        return self.sim_finished - self.rows_ok


def one_trial(url: str, out: Path, wait_s: float, levels: str, output_len: int, env: dict) -> Trial:
    n0 = finished_count(url)
    cmd = [sys.executable, "-m", "specmon", "ramp", url, "--levels", levels, "--level-duration", "100000",
           "--settle", "0", "--input-len", "64", "--output-len", str(output_len),
           "--headless", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while last_level_c(out) is None:
            if proc.poll() is not None:
                raise RuntimeError(f"the ramp exited with {proc.returncode} before its first level")
            if time.monotonic() > deadline:
                raise RuntimeError("no level started within 60 s")
            time.sleep(0.02)
        t_level = time.monotonic()
        time.sleep(wait_s)
        os.kill(proc.pid, signal.SIGKILL)
        after = time.monotonic() - t_level
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    wait_idle(url)
    n1 = finished_count(url)
    ok, rows = ok_rows(out)
    return Trial(after_s=after, c=last_level_c(out), sim_finished=n1 - n0, rows_ok=ok, rows=rows)


def run_trials(url: str, trials: int, max_wait_s: float, seed: int, levels: str = "4,8", output_len: int = 128,
               base: Optional[Path] = None, min_wait_s: float = 0.0) -> list[Trial]:
    rng = random.Random(seed)
    base = Path(base or tempfile.mkdtemp(prefix="specmon-kill9-"))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return [one_trial(url, base / f"t{k}", rng.uniform(min_wait_s, max_wait_s), levels, output_len, env)
            for k in range(trials)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--speed", type=float, default=10.0, help="the simulator's --speed")
    ap.add_argument("--output-len", type=int, default=128,
                    help="tokens per request (with --speed: how many requests finish per second)")
    ap.add_argument("--max-wait", type=float, default=4.0, help="kill at a uniform moment in [0, this] s "
                                                                "after the first level started")
    ap.add_argument("--levels", default="4,8", help="the ramp's --levels (the kill lands in the first, mostly)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=args.speed) as sim:
        results = run_trials(sim.url, args.trials, args.max_wait, args.seed, args.levels, args.output_len)
    print(f"{'trial':>5} {'kill at':>8} {'C':>3} {'sim done':>9} {'ok rows':>8} {'rows':>6} {'lost':>5}")
    for k, t in enumerate(results):
        print(f"{k:>5} {t.after_s:>7.2f}s {t.c or 0:>3} {t.sim_finished:>9} {t.rows_ok:>8} {t.rows:>6} {t.lost:>5}")
    lost = [t.lost for t in results]
    over = [t for t in results if t.c is None or t.lost > t.c or t.lost < 0]
    print(f"rows lost per trial: max {max(lost)}, mean {sum(lost) / len(lost):.1f}, "
          f"total {sum(lost)} of {sum(t.sim_finished for t in results)} finished; "
          f"trials beyond the requests in flight (or with more rows than the simulator finished): {len(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

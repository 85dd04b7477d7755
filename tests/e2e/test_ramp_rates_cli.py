"""`specmon ramp URL --rates ... --arrival gamma --burstiness K --max-concurrency N --headless` as a
user runs it against a real `specmon sim`, then `specmon report` on its folder; and --search with
two servers refused before anything is sent."""

import csv
import subprocess
import sys

from helpers.simproc import REPO, start_sim
from helpers.records import max_overlap


def test_rates_with_a_cap_headless_then_the_report(tmp_path):
    out = tmp_path / "s"
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=10) as sim:
        p = subprocess.run([sys.executable, "-m", "specmon", "ramp", sim.url, "--rates", "0.5,8", "--arrival", "gamma",
                            "--burstiness", "0.5", "--max-concurrency", "2", "--input-len", "512", "--output-len", "200",
                            "--level-duration", "40", "--settle", "4", "--interval", "0.25", "--headless",
                            "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "level 1/2: rate 0.5 req/s, at most 2 in flight, 40 s" in p.stdout
    assert "over-saturated at 8 req/s" in p.stdout and "level cut short" in p.stdout
    low, high = list(csv.DictReader(open(out / "levels.csv")))
    assert (low["offered_rate"], high["offered_rate"]) == ("0.5", "8")
    assert low["knee"] != "over_saturation" and high["knee"] == "over_saturation"
    reqs = list(csv.DictReader(open(out / "requests.csv")))
    for level in ("0", "1"):
        spans = [(float(r["t_start"]), float(r["t_end"])) for r in reqs if r["level"] == level and r["t_end"]]
        assert spans and max_overlap(spans) <= 2                         # the cap holds
    # past the cap requests wait for a slot: sent well after they arrived (the backlog)
    waited = [float(r["t_start"]) - float(r["t_scheduled"]) for r in reqs if r["level"] == "1" and r["status"] == "ok"]
    assert max(waited) > 1.0
    rep = subprocess.run([sys.executable, "-m", "specmon", "report", str(out), "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert rep.returncode == 0, rep.stderr
    md = next((tmp_path / "r").glob("*.md")).read_text()
    assert "| rate req/s | done req/s | C cap |" in md and "cache hit %" in md
    assert "r=8/s over-saturated, cut short: backlog grew" in md

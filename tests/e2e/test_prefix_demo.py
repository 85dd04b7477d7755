"""layouts/prefix-cache.yaml through `specmon demo --prefix`: the same shared-prefix
load on a simulated server with its radix cache and one without (--disable-radix-cache)."""

import csv
import subprocess
import sys

from helpers.simproc import REPO


def test_prefix_cache_demo_shows_the_hit_rate_and_the_ttft_it_buys(tmp_path):
    out = tmp_path / "s"
    p = subprocess.run([sys.executable, "-m", "specmon", "demo", "--prefix", "--levels", "4,8",
                        "--level-duration", "60", "--headless", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "cache hit" in p.stdout
    bad = subprocess.run([sys.executable, "-m", "specmon", "demo", "--prefix", "--layout", "demo", "--headless"],
                         capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert bad.returncode == 2 and "--prefix and --layout" in bad.stderr
    levels = list(csv.DictReader(open(out / "levels.csv")))
    by = {(r["arm"], r["offered_concurrency"]): r for r in levels}
    for c in ("4", "8"):
        on, off = by[("prefix-on", c)], by[("prefix-off", c)]
        # 3,584 of 4,096 tokens are a group's system prompt: 87.5 % once the four are cached (a few more
        # when a question's first ids happen to match another question of its group: 1 in 4,000 each)
        assert 0.8 < float(on["cache_hit_rate"]) < 0.88, on["cache_hit_rate"]
        assert float(off["cache_hit_rate"]) == 0.0 and off["cached_tokens"] == "0"
        assert float(on["ttft_p50_s"]) < 0.5 * float(off["ttft_p50_s"])
    reqs = list(csv.DictReader(open(out / "requests.csv")))
    assert {int(r["prompt_tokens"]) for r in reqs if r["status"] == "ok"} == {4096}

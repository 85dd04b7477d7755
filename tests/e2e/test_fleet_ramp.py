"""`specmon ramp GATEWAY` through the REAL SGLang Model Gateway (smg) with three simulated workers
of different capacity behind it (KV pools of 5,000 and 20,000 tokens and the profile's own
175,000): the load goes to the gateway (one arm), every worker is watched, levels.csv holds the
gateway's row and one row per worker each level, and the worker with the small pool is named as
the one that saturated first (session.json fleet_levels, the headless summary)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
import urllib.request

import pytest

from helpers.gatewayproc import have_gateway, start_gateway
from helpers.simproc import REPO, start_sim
from helpers.records import rows
from specmon.model import LEVEL_COLUMNS
from specmon.sources.gateway import worker_name

pytestmark = pytest.mark.skipif(not have_gateway(), reason="smg (pip install smg) is not installed")

LEVELS = (6, 18, 30)


@pytest.fixture(scope="module")
def fleet_ramp(tmp_path_factory):
    # A local (empty) model folder: the gateway looks a worker's tokenizer up from its model path.
    model = str(tmp_path_factory.mktemp("model"))
    out = tmp_path_factory.mktemp("session")
    flags = ("--enable-metrics", "--model-path", model)
    with start_sim(*flags, "--max-total-tokens", "5000", speed=20) as small, \
         start_sim(*flags, "--max-total-tokens", "20000", speed=20) as medium, \
         start_sim(*flags, speed=20) as large:
        # smg 1.x leaves a worker past 80% KV or 8 queued out of routing by default: off, so round
        # robin sends the small worker its third and it saturates first, as the test means
        with start_gateway("--worker-urls", small.url, medium.url, large.url, "--policy", "round_robin",
                           "--disable-worker-overload-protection", workers=3) as gw:
            t0 = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "specmon", "ramp", gw.url, "--levels", ",".join(map(str, LEVELS)),
                 "--headless", "--interval", "0.5", "--level-duration", "120", "--settle", "30",
                 "--input-len", "1024", "--output-len", "256", "--gateway-metrics", gw.metrics_url,
                 "--out", str(out)],
                capture_output=True, text=True, cwd=str(REPO), timeout=300)
            took = time.monotonic() - t0
            routed = gw.get_json("/workers")
    yield {"proc": proc, "out": out, "gw": gw, "took": took, "routed": routed,
           "small": worker_name(small.url), "medium": worker_name(medium.url), "large": worker_name(large.url),
           "urls": {worker_name(x.url): x.url for x in (small, medium, large)}}


def test_the_gateway_is_the_ramps_arm_and_each_level_has_a_row_per_worker(fleet_ramp):
    proc, out = fleet_ramp["proc"], fleet_ramp["out"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "is a gateway: watching the workers it lists" in proc.stderr
    gw_arm = f":{fleet_ramp['gw'].url.rsplit(':', 1)[1]}"
    with open(out / "levels.csv", newline="") as f:
        header = next(csv.reader(f))
    # Columns are only ever appended: worker keeps its place, the acceptance columns follow it.
    assert header == LEVEL_COLUMNS and header[header.index("worker") + 1:] == ["accept_rate", "accept_hist"]
    levels = rows(out / "levels.csv")
    assert len(levels) == len(LEVELS) * 4
    for i, c in enumerate(LEVELS):
        at = [r for r in levels if int(r["level"]) == i]
        fleet = [r for r in at if not r["worker"]]
        workers = {r["arm"]: r for r in at if r["worker"]}
        assert [r["arm"] for r in fleet] == [gw_arm]  # the load's arm: the gateway, with the client's figures
        assert {a: r["worker"] for a, r in workers.items()} == fleet_ramp["urls"]
        assert all(int(r["offered_concurrency"]) == c for r in at)
        f = fleet[0]
        assert int(f["ok"]) > 0 and float(f["ttft_p50_s"]) > 0 and f["valid"] == "1"
        assert all(int(r["ok"]) == 0 and r["tpot_p50_s"] == "" for r in workers.values())  # never the client's
        # the gateway's server figures are its workers' sums, tick by tick
        assert float(f["running_mean"]) == pytest.approx(sum(float(r["running_mean"]) for r in workers.values()),
                                                         rel=0.05)
        assert all(float(r["output_tok_s"]) > 0 for r in workers.values())  # each worker's own gen tok/s
    top = {r["arm"]: r for r in levels if int(r["level"]) == len(LEVELS) - 1 and r["worker"]}
    small, large = top[fleet_ramp["small"]], top[fleet_ramp["large"]]
    # the small pool (5,000 tokens) admits only 3 requests of 1,024 + 256 (SGLang keeps room for
    # each one's whole output): at most 3,840 tokens, 0.77, used while the rest wait
    assert float(small["kv_usage_max"]) > 0.6 > 0.3 > float(large["kv_usage_max"])
    assert float(small["queued_share"]) >= 0.8 and float(large["queued_share"]) == 0.0
    assert float(small["ttft_p50_s"]) > 5 * float(large["ttft_p50_s"])  # its queue, from its own histogram
    # the load went through the gateway: it routed requests to every worker
    assert {w["url"] for w in fleet_ramp["routed"]["workers"]} == set(fleet_ramp["urls"].values())


def test_the_small_worker_saturated_first_in_session_json_and_the_summary(fleet_ramp):
    proc, out = fleet_ramp["proc"], fleet_ramp["out"]
    meta = json.loads((out / "session.json").read_text())
    gw_arm = f":{fleet_ramp['gw'].url.rsplit(':', 1)[1]}"
    f = meta["fleet_levels"][gw_arm]
    small = fleet_ramp["small"]
    assert f["first_saturated"] == small and f["first_saturated_by"] in ("queueing", "plateau")
    assert f["first_saturated_at"] == 18  # the small pool queues from C=18 (6 a worker), confirmed at C=30
    assert sorted(f["workers"]) == sorted(fleet_ramp["urls"])
    knees = meta["knees"]
    assert knees[small]["queueing"] == 18
    for other in (fleet_ramp["medium"], fleet_ramp["large"]):
        assert knees[other]["queueing"] is None and knees[other]["plateau"] is None
    assert set(f["imbalance"]) == {"0", "1", "2"} and all(v >= 1.0 for v in f["imbalance"].values())
    # the worker row that is the knee is labelled in levels.csv, as any arm's knee row
    labelled = [r for r in rows(out / "levels.csv") if r["arm"] == small and r["knee"]]
    assert [(r["level"], r["knee"]) for r in labelled] == [("1", "queueing")]
    assert f"worker {small} saturated first" in proc.stdout
    assert "routing imbalance by level: C=6 " in proc.stdout


def test_a_remote_gateway_url_still_needs_yes(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specmon", "ramp", "http://192.0.2.7:30000", "--levels", "2",
                           "--headless", "--out", str(tmp_path / "s")],
                          capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert proc.returncode == 2
    assert "not a loopback address" in proc.stderr and "--yes" in proc.stderr
    assert "gateway" not in proc.stderr  # refused before anything was asked of it
    assert time.monotonic() - t0 < 20


def test_workers_joining_mid_ramp_start_a_new_curve_for_the_knees(tmp_path):
    """Two workers, then two more join through the gateway's API as the third level starts: each
    old worker's share falls from C/2 to C/4, so its throughput over the fleet's C flattens; that
    is no plateau. Rows of the new workers begin where they joined."""
    model = str(tmp_path / "model")
    (tmp_path / "model").mkdir()
    flags = ("--enable-metrics", "--model-path", model)
    out = tmp_path / "session"
    with start_sim(*flags, speed=20) as a, start_sim(*flags, speed=20) as b, \
         start_sim(*flags, speed=20) as c, start_sim(*flags, speed=20) as d:
        with start_gateway("--worker-urls", a.url, b.url, "--policy", "round_robin", workers=2) as gw:
            proc = subprocess.Popen(
                [sys.executable, "-m", "specmon", "ramp", gw.url, "--levels", "6,12,18,24", "--headless",
                 "--interval", "0.5", "--level-duration", "90", "--settle", "20", "--input-len", "1024",
                 "--output-len", "256", "--gateway-metrics", gw.metrics_url, "--out", str(out)],
                cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in proc.stdout:
                if line.startswith("level 3/4"):
                    for w in (c, d):
                        req = urllib.request.Request(gw.url + "/workers", data=json.dumps({"url": w.url}).encode(),
                                                     method="POST", headers={"Content-Type": "application/json"})
                        urllib.request.urlopen(req, timeout=30).close()
            assert proc.wait(timeout=300) == 0
    levels = rows(out / "levels.csv")
    old, new = {worker_name(a.url), worker_name(b.url)}, {worker_name(c.url), worker_name(d.url)}
    by_arm = {}
    for r in levels:
        if r["worker"]:
            by_arm.setdefault(r["arm"], []).append(r)
    assert {a: [r["level"] for r in rs] for a, rs in by_arm.items() if a in old} == {n: ["0", "1", "2", "3"] for n in old}
    assert all(rs[0]["level"] in ("2", "3") for a, rs in by_arm.items() if a in new)
    # each old worker ran 6 streams at C=12 (of 2 workers) and again at C=24 (of 4): its tok/s is
    # flat from C=12 on, which over the fleet's C reads as a plateau at C=12 ...
    for name in old:
        x = [float(r["output_tok_s"]) for r in by_arm[name]]
        assert abs(x[3] / x[1] - 1) < 0.3, x
    # ... but the fleet changed in between: no knee is called
    knees = json.loads((out / "session.json").read_text())["knees"]
    assert all(knees[n]["plateau"] is None for n in old), {n: knees[n]["plateau_detail"] for n in old}
    assert not [r for r in levels if r["worker"] and r["knee"]]

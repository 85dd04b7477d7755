"""`specmon ramp URL... --headless` as a user runs it, against two real sims."""

import csv
import json
import os
import subprocess
import sys

from helpers.simproc import REPO, start_sim


def test_ramp_headless_two_arms_prints_the_level_table(tmp_path):
    out = tmp_path / "s"
    with start_sim("--profile", "fp8-mtp", "--enable-metrics", speed=50) as a, \
            start_sim("--profile", "nvfp4-mtp", "--api-key", "sekrit-123", speed=50) as b:
        env = dict(os.environ, SIM_KEY="sekrit-123")
        # one key env for both arms: the fp8 sim has no key and ignores the header
        p = subprocess.run([sys.executable, "-m", "specmon", "ramp", "--name", f"fp8={a.url}",
                            "--name", f"nvfp4={b.url}", "--api-key-env", "SIM_KEY", "--levels", "2,3",
                            "--requests-per-level", "6", "--input-len", "256", "--output-len", "16",
                            "--settle", "0", "--interval", "0.5", "--headless", "--out", str(out)],
                           capture_output=True, text=True, timeout=120, cwd=str(REPO), env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("arm ") and "per-user tok/s" in line)
    table = lines[head:head + 5]
    assert [c.strip() for c in table[0].split("|")][:4] == ["arm", "C", "achieved", "out tok/s"]
    assert [r.split("|")[0].strip() for r in table[1:]] == ["fp8", "nvfp4", "fp8", "nvfp4"]
    assert all(r.split("|")[8].strip() == "6/0" for r in table[1:])
    reqs = list(csv.DictReader(open(out / "requests.csv")))
    assert len(reqs) == 24 and {r["status"] for r in reqs} == {"ok"}
    assert {int(r["prompt_tokens"]) for r in reqs} == {256}
    for name in ("requests.csv", "levels.csv", "samples.csv", "session.json"):
        assert "sekrit-123" not in (out / name).read_text()
    session = json.loads((out / "session.json").read_text())
    assert set(session["knees"]) == {"fp8", "nvfp4"}
    assert session["time_scale"] == {"fp8": 50.0, "nvfp4": 50.0}


def test_ramp_against_a_dead_port_backs_off_and_exits_3(tmp_path):
    """Nobody listens: every request fails without an answer. The ramp records them, backs off
    per stream (50 ms doubling to 1 s) instead of a connect storm, and exits 3 naming the arm."""
    from helpers.simproc import free_port

    port = free_port()
    out = tmp_path / "s"
    p = subprocess.run([sys.executable, "-m", "specmon", "ramp", f"http://127.0.0.1:{port}", "--levels", "2",
                        "--level-duration", "3", "--settle", "0", "--headless", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert p.returncode == 3, (p.stdout[-1000:], p.stderr[-1000:])
    assert f"127.0.0.1:{port}" in p.stderr and "Traceback" not in p.stderr
    reqs = list(csv.DictReader(open(out / "requests.csv")))
    assert reqs and all(r["status"] == "error" and r["error"].startswith("ConnectError") for r in reqs)
    # 2 streams x (0.05 + 0.1 + 0.2 + 0.4 + 0.8 + 1 ...) over ~3 s: a handful each, not thousands
    assert len(reqs) <= 2 * 10, len(reqs)

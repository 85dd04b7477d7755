"""Launch mode records each server's start-up seconds by phase in session.json (ArmInfo.startup_s):
from /server_info's startup_time on 0.5.23, from the log's own elapsed lines on 0.5.10, whose
/server_info has none. `specmon sim` speaks either release and prints both releases' lines."""

import json
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest


def _launch_until_info(tmp_path, version: str) -> tuple[dict, str]:
    (tmp_path / "x.yaml").write_text(textwrap.dedent(f"""
        command: [python, -m, specmon.servers.sim]
        startup_timeout_s: 60
        arms:
          - name: a
            launch: {{flags: {{profile: fp8-mtp, speed: 20, sglang_version: "{version}"}}}}
        """))
    out = open(tmp_path / "out.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "launch", "x.yaml", "--headless", "--out", "s"],
                            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    args: dict = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                meta = json.loads((tmp_path / "s" / "session.json").read_text())
                args = next((a.get("server_args") or {} for a in meta.get("arms", []) if a.get("name") == "a"), {})
            except (OSError, ValueError):
                pass
            if args.get("model"):
                break
            time.sleep(0.3)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    log = next((tmp_path / "s").rglob("a.log")).read_text()
    return args, log


def test_launch_0510_startup_phases_come_from_the_log(tmp_path):
    args, log = _launch_until_info(tmp_path, "0.5.10")
    assert "Engine startup timings" not in log
    graphs = [float(x) for x in re.findall(r"graph end\. Time elapsed: ([\d.]+) s", log)]
    assert len(graphs) == 3  # target, draft, draft extend (the profile speculates)
    want = {"init_distributed": float(re.search(r"Init torch distributed ends\. elapsed=([\d.]+) s", log)[1]),
            "load_weight": float(re.search(r"Load weight end\. elapsed=([\d.]+) s", log)[1]),
            "cuda_graph": sum(graphs)}
    got = args.get("startup_s")
    assert got is not None and got.keys() == want.keys(), (got, want)
    assert all(got[k] == pytest.approx(want[k], abs=1e-9) for k in want)


def test_launch_0523_startup_phases_come_from_server_info(tmp_path):
    args, log = _launch_until_info(tmp_path, "0.5.23")
    line = re.search(r"Engine startup timings \(s\): (.*)", log)[1]
    got = args.get("startup_s")
    assert got is not None and set(got) == {"load_weight", "kv_cache_allocation", "scheduler_e2e", "cuda_graph",
                                            "tokenizer_e2e"}
    # /server_info's seconds, which the log line prints rounded to 0.01 s
    assert got["load_weight"] == pytest.approx(float(re.search(r"load_weight=([\d.]+)", line)[1]), abs=0.006)

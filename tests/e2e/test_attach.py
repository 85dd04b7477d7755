"""`specmon attach` end to end as a subprocess against real sims: headless output and CSVs,
the read-only proof from the sim's request log, bad input exit codes, the key never written."""

from __future__ import annotations

import csv
import json

from helpers.simproc import start_sim
from helpers.attach import attach

SPEED = 20.0


def test_headless_attach_end_to_end_is_read_only(tmp_path):
    log = tmp_path / "requests.log"
    out = tmp_path / "session"
    with start_sim("--enable-metrics", "--profile", "nvfp4-mtp", "--request-log", str(log), speed=SPEED) as sim:
        before = log.read_text().splitlines()  # start_sim's own /health polls
        p = attach(sim.url, "--name", f"nv={sim.url}", "--headless", "--duration", "3", "--interval", "0.5",
                   "--out", str(out), "--isl", "8192", "--osl", "1024")
        seen = log.read_text().splitlines()[len(before):]
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    tick_lines = [ln for ln in lines if ":" in ln[:8] and " run " in ln]
    assert 3 <= len(tick_lines) <= 8  # 3 s at 2 Hz (fewer where a busy host starts slowly)
    assert any(ln.startswith("knee [predicted] nv:") and "8192+1024" in ln for ln in lines)
    assert any("NVML unavailable" in ln for ln in lines)
    # Read-only: the attach sent only GETs, and it did send some.
    assert seen and all(ln.startswith("GET ") for ln in seen), seen
    assert any(ln == "GET /metrics" for ln in seen) and any(ln.startswith("GET /server_info") for ln in seen)
    with open(out / "samples.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["arm"] for r in rows} == {"nv", f":{sim.port}"}
    assert len(rows) == 2 * len(tick_lines)
    session = json.loads((out / "session.json").read_text())
    assert session["exit_reason"] == "duration reached" and session["end_time"]
    assert session["arms"][0]["server_args"]["speculative_num_draft_tokens"] == 4
    assert session["predicted_knees"]["nv"]["isl"] == 8192


def test_api_key_from_env_never_written(tmp_path):
    out = tmp_path / "s"
    with start_sim("--api-key", "sk-very-secret", speed=SPEED) as sim:
        p = attach(sim.url, "--api-key-env", "MY_SGL_KEY", "--headless", "--duration", "2", "--interval", "0.5",
                   "--out", str(out), env={"MY_SGL_KEY": "sk-very-secret"})
    assert p.returncode == 0, p.stderr
    assert "unauthorized" not in p.stdout.lower() and " run " in p.stdout
    assert "sk-very-secret" not in p.stdout + p.stderr
    for f in out.iterdir():
        assert "sk-very-secret" not in f.read_text()

"""`specmon attach` end to end as a subprocess against real sims: headless output and CSVs,
the read-only proof from the sim's request log, bad input exit codes, the key never written."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

from helpers.simproc import REPO, free_port, start_sim

SPEED = 20.0


def attach(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", "attach", *args], cwd=str(REPO), capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


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


def test_missing_env_var_and_bad_url_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NO_SUCH_KEY_VAR"}
    p = subprocess.run([sys.executable, "-m", "specmon", "attach", "http://127.0.0.1:1", "--api-key-env",
                        "NO_SUCH_KEY_VAR", "--headless", "--duration", "1", "--out", str(tmp_path / "a")],
                       cwd=str(REPO), capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 2 and "NO_SUCH_KEY_VAR" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = attach("localhost:30000/x", "--headless", "--duration", "1", "--out", str(tmp_path / "b"))
    assert p.returncode == 2 and "localhost:30000/x" in p.stderr
    p = attach("--name", "broken", "--headless", "--duration", "1", "--out", str(tmp_path / "c"))
    assert p.returncode == 2 and "NAME=URL" in p.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_no_server_ever_answers_exit_3(tmp_path):
    port = free_port()
    p = attach(f"http://127.0.0.1:{port}", "--headless", "--duration", "1.5", "--interval", "0.5",
               "--out", str(tmp_path / "s"))
    assert p.returncode == 3 and f"127.0.0.1:{port}" in p.stderr and "refused" in p.stderr
    assert "REFUSED" in p.stdout
    with open(tmp_path / "s" / "samples.csv", newline="") as f:
        assert {r["up"] for r in csv.DictReader(f)} == {"0"}

"""Launch mode end to end, with `specmon sim` started in place of SGLang through the layout's
`command:` override: real processes, real HTTP, real process groups."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from specmon.sources import logparse as lp

from helpers.simproc import group_pids
from helpers.launch import GRANDCHILD, SIM, gone


def run_specmon(*args, cwd, timeout=240):
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------------------------


def test_two_arms_two_levels_restart_between(tmp_path):
    """Two simulated arms, two levels, restart between levels: CSVs, logs, phases, session.json."""
    # Levels last 40 simulated s = 0.8 wall s at speed 50: scrape every 0.2 s so each has samples.
    (tmp_path / "two.yaml").write_text(SIM + "interval_s: 0.2\n" + textwrap.dedent("""
        arms:
          - name: fp8
            launch: {flags: {profile: fp8-mtp, speed: 50, enable_metrics: true}}
          - name: nvfp4
            launch: {flags: {profile: nvfp4-mtp, speed: 50}}   # no --enable-metrics: /v1/loads + log lines
        ramp: {levels: [2, 4], input_len: 600, output_len: 64, level_duration_s: 40, settle_s: 5,
               restart_between_levels: true}
        """))
    out = tmp_path / "session"
    r = run_specmon("launch", "two.yaml", "--headless", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    levels = read_csv(out / "levels.csv")
    assert sorted((row["arm"], row["offered_concurrency"]) for row in levels) == [
        ("fp8", "2"), ("fp8", "4"), ("nvfp4", "2"), ("nvfp4", "4")]
    assert all(int(row["ok"]) > 0 and row["failed"] == "0" for row in levels)
    samples = read_csv(out / "samples.csv")
    assert {s["arm"] for s in samples} == {"fp8", "nvfp4"}
    assert {s["level"] for s in samples if s["level"]} >= {"0", "1"}
    # each server was started twice (restart between the levels), into one log per arm
    for arm in ("fp8", "nvfp4"):
        log = (out / "logs" / f"{arm}.log").read_text()
        assert log.count("----- specmon: start #") == 2 and log.count(lp.READY_TEXT) == 2
    assert r.stdout.count("fp8: ready") == 2 and "restarting" in r.stdout
    assert "kv pool allocated" in r.stdout
    session = json.loads((out / "session.json").read_text())
    assert [a["name"] for a in session["layout"]["arms"]] == ["fp8", "nvfp4"]


def test_cli_all_failed_exit_3(tmp_path):
    (tmp_path / "x.yaml").write_text(SIM + "arms:\n  - name: bad\n    launch: {flags: {drafter: nosuch}}\n")
    r = run_specmon("launch", "x.yaml", "--headless", "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert "bad" in r.stderr and "unknown drafter" in r.stderr and "Traceback" not in r.stderr


# ---- shutdown: no orphans ------------------------------------------------------------------


def test_sigterm_to_specmon_leaves_no_orphan(tmp_path):
    """SIGTERM to `specmon launch` mid-ramp: every pid of every launched group is gone."""
    (tmp_path / "x.yaml").write_text(SIM + textwrap.dedent(GRANDCHILD.format(py=sys.executable)) + textwrap.dedent("""
        ramp: {levels: [2], input_len: 300, output_len: 64, level_duration_s: 100000, settle_s: 0}
        """))
    out_file = open(tmp_path / "out.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "launch", "x.yaml", "--headless", "--out", "s"],
                            cwd=tmp_path, stdout=out_file, stderr=subprocess.STDOUT, text=True)
    try:
        pids: list[int] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            kids = psutil.Process(proc.pid).children(recursive=True)
            logs = list((tmp_path / "s" / "logs").glob("*.log")) if (tmp_path / "s" / "logs").exists() else []
            if len(logs) == 2 and all(lp.READY_TEXT in p.read_text() for p in logs):
                pids = [k.pid for k in kids]
                pgids = {os.getpgid(k.pid) for k in kids}
                pids = sorted({p for g in pgids for p in group_pids(g)} | set(pids))
                break
            time.sleep(0.3)
        assert len(pids) >= 3, "servers never became ready: " + (tmp_path / "out.txt").read_text()[-2000:]
        time.sleep(1.0)  # the ramp is running now
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        out = (tmp_path / "out.txt").read_text()
        assert gone(pids) == [], out[-2000:]
        assert "terminated" in out and "level 1/1" in out
    finally:
        if proc.poll() is None:
            proc.kill()


def test_exception_without_stop_is_cleaned_at_exit(tmp_path):
    """A program that starts servers then dies of an exception: the atexit hook stops them."""
    (tmp_path / "x.yaml").write_text(SIM + "arms:\n  - name: a\n    launch: {flags: {profile: fp8-mtp, speed: 50}}\n")
    script = "\n".join([
        "import asyncio",
        "from pathlib import Path",
        "from specmon.servers.layout import load_layout",
        "from specmon.servers.launch import Supervisor",
        f"sup = Supervisor(load_layout({str(tmp_path / 'x.yaml')!r})[0], Path({str(tmp_path)!r}))",
        "asyncio.run(sup.start(lambda e: None))",
        "print(sup.launched['a'].proc.pid, flush=True)",
        "raise RuntimeError('boom')",
    ])
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "RuntimeError: boom" in r.stderr
    pid = int(r.stdout.split()[0])
    assert gone([pid]) == []


def test_demo_command_short(tmp_path):
    """`specmon demo` from the packaged layout with CLI overrides: both arms, every level recorded."""
    r = run_specmon("demo", "--headless", "--levels", "4,8", "--level-duration", "40", "--speed", "40",
                    "--out", str(tmp_path / "d"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    levels = read_csv(tmp_path / "d" / "levels.csv")
    assert sorted((row["arm"], row["offered_concurrency"]) for row in levels) == [
        ("fp8-mtp", "4"), ("fp8-mtp", "8"), ("nvfp4-mtp", "4"), ("nvfp4-mtp", "8")]
    assert "--speed 40" in (tmp_path / "d" / "logs" / "fp8-mtp.log").read_text().splitlines()[0]

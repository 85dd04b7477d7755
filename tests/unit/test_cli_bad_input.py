"""Bad input to the real command line (`python -m specmon ...` in a subprocess): each case is one
line on stderr and exit 2, never a traceback, a hang or memory growing; `specmon ... | head` exits
quietly; `specmon ramp` sends load to another machine only with --yes.

No case here opens a connection: every refusal comes before any server is contacted (the URLs
are dead 127.0.0.1 ports or TEST-NET-1 addresses, which nothing answers)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.simproc import REPO

DATA = Path(__file__).resolve().parents[1] / "data"
DEAD = "http://127.0.0.1:9"  # discard port: nothing listens there in the test environment
FAR = "http://192.0.2.1:30000"  # TEST-NET-1 (RFC 5737): not routed, never this machine


def specmon(*args: str, cwd: Path = REPO, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=str(cwd))


def one_line_exit_2(p: subprocess.CompletedProcess, *needles: str) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert len(lines) == 1, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize("command, flag", [
    (["attach", DEAD, "--headless"], "--interval"),
    (["ramp", DEAD, "--levels", "2", "--headless"], "--interval"),
    (["launch", "demo", "--headless"], "--interval"),
    (["ramp", DEAD, "--levels", "2", "--headless"], "--level-duration"),
    (["demo", "--headless"], "--level-duration"),
    (["attach", DEAD, "--headless"], "--duration"),
])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_seconds_are_refused(tmp_path, command, flag, value):
    out = tmp_path / "s"
    line = one_line_exit_2(specmon(*command, f"{flag}={value}", "--out", out), flag, value)
    assert "finite" in line
    assert not out.exists()


@pytest.mark.parametrize("command", [["attach", DEAD, "--headless"], ["ramp", DEAD, "--levels", "2", "--headless"],
                                     ["launch", "demo", "--headless"]])
@pytest.mark.parametrize("value", ["1e-9", "0.05"])
def test_an_interval_under_the_floor_is_one_line(tmp_path, command, value):
    out = tmp_path / "s"
    line = one_line_exit_2(specmon(*command, "--interval", value, "--out", out), "--interval", "at least 0.1 s")
    assert not out.exists()


def test_the_interval_floor_is_in_help():
    assert "at least 0.1" in " ".join(specmon("attach", "--help").stdout.split())


@pytest.mark.parametrize("command", [["attach"], ["ramp", "--levels", "2"]])
def test_unclosed_ipv6_url_is_one_line(tmp_path, command):
    line = one_line_exit_2(specmon(*command, "http://[::1", "--headless", "--out", tmp_path / "s"), "http://[::1")
    assert "expected a URL like" in line


def test_name_with_bad_port_is_one_line(tmp_path):
    one_line_exit_2(specmon("attach", "--name", "a=http://127.0.0.1:99999", "--headless", "--out", tmp_path / "s"),
                    "--name a", "port", "99999")


def test_layout_attach_url_with_port_99999(tmp_path):
    layout = tmp_path / "far.yaml"
    layout.write_text("arms:\n  - {name: a, attach: 'http://127.0.0.1:99999'}\nramp: {levels: [1]}\n")
    line = one_line_exit_2(specmon("launch", layout, "--headless", cwd=tmp_path))
    assert line == f"specmon: error: {layout}: arms[0].attach: expected a port from 1 to 65535 in 'http://127.0.0.1:99999'"
    assert not (tmp_path / "specmon-sessions").exists()


@pytest.mark.parametrize("args, needles", [
    (["--levels", "100000000"], ["--levels", "100,000", "100000000"]),
    (["--levels", ",".join(["1"] * 5000)], ["--levels", "at most 1,000 levels"]),
    (["--levels", "2", "--input-len", "1e11"], ["--input-len", "1,000,000", "100000000000"]),
    (["--levels", "2", "--input-len", "100000000000"], ["--input-len", "1,000,000"]),
    (["--levels", "2", "--output-len", "1e11"], ["--output-len", "1,000,000"]),
    (["--levels", "2", "--requests-per-level", "1e30"], ["--requests-per-level"]),
    (["--levels", "2", "--settle", "nan"], ["--settle", "finite"]),
    (["--levels", "2", "--settle", "-1"], ["--settle", ">= 0"]),
    (["--levels", "2", "--slo-ttft", "inf"], ["--slo-ttft", "finite"]),
    (["--levels", "2", "--slo-tpot", "nan"], ["--slo-tpot", "finite"]),
    (["--levels", "2", "--category", "low_entropy"], ["--category", "dataset"]),
])
def test_ramp_plan_out_of_bounds_is_one_line(tmp_path, args, needles):
    t0 = time.monotonic()
    one_line_exit_2(specmon("ramp", DEAD, *args, "--headless", "--out", tmp_path / "s"), *needles)
    assert time.monotonic() - t0 < 30  # refused up front, not after building giant prompts
    assert not (tmp_path / "s").exists()


def test_demo_override_out_of_bounds_is_one_line(tmp_path):
    one_line_exit_2(specmon("demo", "--headless", "--levels", "5,200000", "--out", tmp_path / "s"),
                    "--levels", "200000")
    assert not (tmp_path / "s").exists()


def _deep_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def test_deeply_nested_dataset_line_is_a_bad_line(tmp_path):
    """json.loads raises RecursionError on it: counted and skipped like any bad line (here the only
    line, so the file has no usable prompt: exit 2 naming the file and the count)."""
    f = tmp_path / "deep.jsonl"
    f.write_text(_deep_object(200_000) + "\n")
    one_line_exit_2(specmon("ramp", DEAD, "--levels", "1", "--dataset", f, "--headless", "--out", tmp_path / "s"),
                    str(f), "no usable prompt", "1 bad line")


def test_deeply_nested_json_array_dataset(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text("[" * 200_000 + "]" * 200_000)
    one_line_exit_2(specmon("ramp", DEAD, "--levels", "1", "--dataset", f, "--headless", "--out", tmp_path / "s"),
                    str(f), "nested too deeply")


def test_closed_stdout_pipe_exits_quietly(tmp_path):
    """`specmon report ... | head`: the reader is gone before specmon writes. Without the handler
    this is a BrokenPipeError traceback (and an 'Exception ignored' at interpreter exit)."""
    r, w = os.pipe()
    os.close(r)  # no reader at all: the first write that reaches the pipe fails with EPIPE
    try:
        p = subprocess.run([sys.executable, "-m", "specmon", "report", str(DATA / "session_demo_2arm"),
                            "--out", str(tmp_path / "r")], stdout=w, stderr=subprocess.PIPE, text=True,
                           timeout=120, cwd=str(REPO))
    finally:
        os.close(w)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr and "Exception ignored" not in p.stderr


def test_report_still_writes_to_an_open_pipe(tmp_path):
    p = subprocess.run(f"{sys.executable} -m specmon report {DATA / 'session_demo_2arm'} --out {tmp_path / 'r'} | head -1",
                       shell=True, capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert p.stdout.startswith("# specmon report") and "Traceback" not in p.stderr


# --------------------------------------------------------------------------------------------
# specmon ramp to a machine that is not this one


def test_ramp_to_a_remote_address_needs_yes(tmp_path):
    t0 = time.monotonic()
    p = specmon("ramp", FAR, "--levels", "2", "--headless", "--out", tmp_path / "s")
    elapsed = time.monotonic() - t0
    line = one_line_exit_2(p, FAR, "--yes")
    assert "not a loopback address" in line
    # A connection attempt to TEST-NET would hang for its timeout; the refusal comes first.
    assert elapsed < 20, elapsed
    assert not (tmp_path / "s").exists()


def test_one_remote_arm_among_local_ones_is_named(tmp_path):
    p = specmon("ramp", DEAD, "--name", "far=http://192.0.2.7:8000", "--levels", "2", "--headless",
                "--out", tmp_path / "s")
    line = one_line_exit_2(p, "http://192.0.2.7:8000", "--yes")
    assert "127.0.0.1" not in line


def test_loopback_addresses_need_no_yes(tmp_path):
    """localhost, ::1 and all of 127.0.0.0/8 pass the check: the run goes on to the next one
    (the missing dataset, still before any request) instead of asking for --yes."""
    missing = tmp_path / "missing.jsonl"
    p = specmon("ramp", "http://localhost:9", "http://[::1]:9", "http://127.3.4.5:9", "--levels", "2",
                "--dataset", missing, "--headless", "--out", tmp_path / "s")
    line = one_line_exit_2(p, str(missing), "file not found")
    assert "--yes" not in line


def test_yes_lets_a_remote_ramp_past_the_check(tmp_path):
    """With --yes the loopback check passes (the missing dataset is refused next, before any
    connection, so nothing is sent to the TEST-NET address)."""
    missing = tmp_path / "missing.jsonl"
    p = specmon("ramp", FAR, "--yes", "--levels", "2", "--dataset", missing, "--headless", "--out", tmp_path / "s")
    line = one_line_exit_2(p, "file not found")
    assert "--yes" not in line


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_sim_speed_that_is_not_a_positive_number_is_one_line(value):
    one_line_exit_2(specmon("sim", "--speed", value, "--port", "9"), "--speed", value)


@pytest.mark.parametrize("command", [["attach"], ["ramp", "--levels", "2"]])
def test_a_non_ascii_host_name_is_one_line(tmp_path, command):
    line = one_line_exit_2(specmon(*command, "http://hôst.example:30000", "--headless", "--out", tmp_path / "s"),
                           "hôst.example")
    assert "ASCII" in line and not (tmp_path / "s").exists()

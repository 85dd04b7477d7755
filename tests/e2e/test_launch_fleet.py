"""A layout with a `gateway:` (SGLang's model gateway, smg): validated like the rest of a layout
(one line naming the key), and `specmon launch` starts the workers, then the REAL gateway with
their URLs once they are up, ramps through the gateway while every worker is watched, and stops
every process at the end (each launched process group is gone, the gateway's too)."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from helpers.gatewayproc import have_gateway
from helpers.launch import PID_LINE, SIM
from helpers.simproc import free_port
from specmon.errors import UsageError
from specmon.servers.launch import Supervisor
from specmon.servers.layout import load_layout, parse_layout

REPO = Path(__file__).resolve().parents[2]


def bad(text: str) -> str:
    with pytest.raises(UsageError) as e:
        parse_layout(SIM + text, "layouts/x.yaml", env={})
    msg = str(e.value)
    assert "\n" not in msg
    return msg


ARMS = "arms:\n  - {name: a, launch: {flags: {speed: 50}}}\n  - {name: b, launch: {flags: {speed: 50}}}\n"


@pytest.mark.parametrize("text, expected", [
    (ARMS + "gateway: {workers: [a, c]}\n",
     "layouts/x.yaml: gateway.workers: 'c' is not an arm of this layout (arms: a, b)"),
    (ARMS + "gateway: {name: a}\n",
     "layouts/x.yaml: gateway.name: 'a' is also an arm's name (their log files would clash)"),
    (ARMS + "gateway: {policy: fastest}\n",
     "layouts/x.yaml: gateway.policy: expected one of random, round_robin, cache_aware, power_of_two, manual, "
     "got 'fastest'"),
    (ARMS + "gateway: {flags: {worker_urls: [http://h:1]}}\n",
     "layouts/x.yaml: gateway.flags: 'worker_urls' is set by specmon from gateway.workers"),
    (ARMS + "gateway: {flags: {prometheus_port: 9}}\n",
     "layouts/x.yaml: gateway.flags: 'prometheus_port' is set by specmon: use gateway.metrics_port instead of a flag"),
    (ARMS + "gateway: {port: 40000, metrics_port: 40000}\n",
     "layouts/x.yaml: gateway.port, gateway.metrics_port: expected ports distinct from each other and from the "
     "arms' launch ports"),
    (ARMS + "gateway: {prot: 1}\n",
     "layouts/x.yaml: gateway.prot: unknown key (expected one of: name, workers, policy, port, metrics_port, host, "
     "command, flags, env, startup_timeout_s)"),
    ("arms:\n  - {name: p, launch: {flags: {disaggregation_mode: prefill}}}\n  - {name: r, launch: {flags: {}}}\n"
     "gateway: {}\n",
     "layouts/x.yaml: gateway.workers: prefill or decode workers beside regular ones (a gateway routes one way)"),
    ("arms:\n  - {name: p, launch: {flags: {disaggregation_mode: prefill}}}\ngateway: {}\n",
     "layouts/x.yaml: gateway.workers: a PD gateway needs prefill and decode workers, found only prefill"),
    ("arms:\n  - {name: x, attach: 'http://127.0.0.1:1'}\ngateway: {}\n",
     "layouts/x.yaml: gateway.workers: no arm is launched; name the attached arms behind the gateway"),
    (ARMS + "gateway: {}\nramp: {levels: [1], restart_between_levels: true}\n",
     "layouts/x.yaml: ramp.restart_between_levels: not with a gateway (its workers would drop out of its registry "
     "mid-ramp)"),
])
def test_a_bad_gateway_section_is_one_line(text, expected):
    assert bad(text) == expected


def test_the_gateway_argv_regular_and_pd(tmp_path):
    layout, _ = load_layout("fleet", env={})
    sup = Supervisor(layout, tmp_path)
    names = [a.name for a in layout.arms]
    assert [a.name for a in sup.arms] == names and {a.fleet for a in sup.arms} == {"gateway gw"}
    assert [a.name for a in sup.ramp_arms] == ["gw"]  # the ramp loads the gateway, not its workers
    for a in sup.launched.values():  # an empty local model folder: the gateway never looks a name up online
        a.ready = True
        assert a.extra_argv == ["--model-path", str(tmp_path / "logs" / "sim-model")]
    assert sup._gateway_argv() == ["--worker-urls", *(a.url for a in sup.arms)]
    flags = sup.gateway.layout.launch.flags
    assert flags["policy"] == "round_robin" and flags["prometheus_host"] == "127.0.0.1"
    assert sup.gateway_metrics_url == f"http://127.0.0.1:{flags['prometheus_port']}/metrics"
    env = sup.gateway.layout.launch.env
    assert env["HF_ENDPOINT"] == "http://127.0.0.1:9" and env["HF_HUB_OFFLINE"] == "1"
    list(sup.launched.values())[1].ready = False  # a worker that did not come up is not given to the gateway
    assert sup._gateway_argv() == ["--worker-urls", *(a.url for a in sup.arms if a.name != names[1])]

    pd, _ = parse_layout(SIM + textwrap.dedent("""
        arms:
          - {name: p, launch: {flags: {disaggregation_mode: prefill, disaggregation_bootstrap_port: 8998}}}
          - {name: d, launch: {flags: {disaggregation_mode: decode}}}
        gateway: {name: pdgw, env: {HF_ENDPOINT: 'http://127.0.0.1:7'}}
        """), "pd.yaml", env={})
    sup = Supervisor(pd, tmp_path / "pd")
    for a in sup.launched.values():
        a.ready = True
    p, d = sup.arms
    assert (p.role, d.role) == ("prefill", "decode")
    assert sup._gateway_argv() == ["--pd-disaggregation", "--prefill", p.url, "8998", "--decode", d.url]
    assert sup.gateway.layout.launch.env["HF_ENDPOINT"] == "http://127.0.0.1:7"  # the layout's own, kept


def test_automatic_ports_keep_clear_of_the_named_ones_and_of_the_kernels_ephemeral_range(tmp_path):
    """A port the kernel hands out by bind(0) it hands out again: CI once saw the gateway's picked
    port taken by the prefill worker's bootstrap port, which the test had from bind(0) too."""
    from specmon.servers.launch import ephemeral_range
    lo, hi = ephemeral_range()
    pd, _ = parse_layout(SIM + textwrap.dedent("""
        arms:
          - {name: p, launch: {flags: {disaggregation_mode: prefill, disaggregation_bootstrap_port: 21000}}}
          - {name: d, launch: {flags: {disaggregation_mode: decode}}}
          - {name: e, launch: {port: 21001, flags: {disaggregation_mode: decode}}}
        gateway: {name: pdgw, metrics_port: 21002}
        """), "pd.yaml", env={})
    for i in range(100):
        sup = Supervisor(pd, tmp_path / str(i))
        auto = [sup.launched["p"].port, sup.launched["d"].port, sup.gateway.port]
        ports = auto + [21000, 21001, 21002]
        assert len(set(ports)) == len(ports), ports
        assert sup.launched["e"].port == 21001
        assert not [p for p in auto if lo <= p <= hi], (auto, lo, hi)


def test_the_tests_own_ports_keep_clear_of_the_kernels_ephemeral_range():
    """The tests' servers get their ports the same way: CI once saw a real SGLang scheduler's own
    listener (on a kernel-picked port) take the HTTP port the test had from bind(0), and the server
    accepted /health for 300 s without answering it."""
    from specmon.servers.launch import ephemeral_range
    lo, hi = ephemeral_range()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert not [p for p in ports if lo <= p <= hi], (lo, hi)


def group_pids(log_dir: Path) -> dict[str, int]:
    out = {}
    for log in log_dir.glob("*.log"):
        m = PID_LINE.search(log.read_text(errors="replace"))
        if m:
            out[log.stem] = int(m.group(2))
    return out


def group_members(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error, OSError):
            pass
    return out


@pytest.mark.skipif(not have_gateway(), reason="smg (pip install smg) is not installed")
def test_launch_the_fleet_layout_headless_ramps_through_the_gateway_and_leaves_nothing(tmp_path):
    layout = (REPO / "layouts" / "fleet.yaml").read_text()
    # the shipped layout with a short ramp (two levels of 60 simulated seconds)
    layout = re.sub(r"ramp:\n(  .*\n)+", "ramp:\n  levels: [4, 12]\n  input_len: 2048\n  output_len: 256\n"
                    "  level_duration_s: 60\n  settle_s: 15\n  seed: 7\n", layout)
    path = tmp_path / "fleet.yaml"
    path.write_text(layout)
    out = tmp_path / "session"
    seen: dict[str, list[int]] = {}
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "launch", str(path), "--headless", "--out", str(out)],
                            cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        for name, pgid in group_pids(out / "logs").items():  # every group's members, while they run
            seen.setdefault(name, [])
            seen[name] = sorted(set(seen[name]) | set(group_members(pgid)))
        time.sleep(0.5)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    # five groups: four workers and the gateway, each seen running, each gone now
    assert set(seen) == {"w1-fp8", "w2-nvfp4", "w3-dp2", "w4-small", "gw"}
    assert all(seen.values())
    for name, pgid in group_pids(out / "logs").items():
        assert group_members(pgid) == [], f"{name}'s group {pgid} outlived specmon"
    assert not [p for pids in seen.values() for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    # the gateway came up after its four workers, with their URLs, and said when it listed them all
    lines = stdout.splitlines()
    ready = {ln.split(":")[0]: i for i, ln in enumerate(lines) if ln.endswith(": ready") or ": ready (" in ln}
    assert set(ready) >= {"w1-fp8", "w2-nvfp4", "w3-dp2", "w4-small", "gw"}
    assert ready["gw"] > max(ready[w] for w in ("w1-fp8", "w2-nvfp4", "w3-dp2", "w4-small"))
    assert "gw: ready (/workers lists its 4 workers healthy)" in stdout
    log = (out / "logs" / "gw.log").read_text().splitlines()
    assert "smg" in log[0]
    # which smg ran, and its version: in the log and in session.json
    ran = json.loads((out / "session.json").read_text())["gateway"]
    assert log[2] == f"----- specmon: gateway: {ran['binary']} ({ran['version']})"
    assert ran["version"].startswith("smg 1.") and Path(ran["binary"]).name == "smg"
    # the ramp went through the gateway: its row and one per worker, under the layout's names
    with open(out / "levels.csv", newline="") as f:
        levels = list(csv.DictReader(f))
    assert [(r["level"], r["arm"]) for r in levels if not r["worker"]] == [("0", "gw"), ("1", "gw")]
    assert sorted(r["arm"] for r in levels if r["worker"] and r["level"] == "1") == [
        "w1-fp8", "w2-nvfp4", "w3-dp2", "w4-small"]
    assert all(int(r["ok"]) > 0 for r in levels if not r["worker"])
    meta = json.loads((out / "session.json").read_text())
    assert meta["mode"] == "launch" and meta["exit_reason"] == "ramp done"
    assert {a["name"]: a["fleet"] for a in meta["arms"]} == {w: "gateway gw" for w in
                                                             ("w1-fp8", "w2-nvfp4", "w3-dp2", "w4-small")}
    assert meta["fleet_levels"]["gw"]["workers"] == ["w1-fp8", "w2-nvfp4", "w3-dp2", "w4-small"]
    assert meta["layout"]["gateway"]["policy"] == "round_robin"
    # the DP worker's samples carry its two ranks
    with open(out / "samples.csv", newline="") as f:
        ranks = {r["dp_rank"] for r in csv.DictReader(f) if r["arm"] == "w3-dp2" and r["dp_rank"]}
    assert ranks == {"0", "1"}


@pytest.mark.skipif(not have_gateway(), reason="smg (pip install smg) is not installed")
def test_a_pd_layout_launches_a_pd_gateway_and_ramps_through_it(tmp_path):
    path = tmp_path / "pd.yaml"
    path.write_text(SIM + textwrap.dedent("""
        interval_s: 0.5
        arms:
          - name: prefill
            launch: {flags: {speed: 20, enable_metrics: true, disaggregation_mode: prefill,
                             disaggregation_bootstrap_port: %d}}
          - name: decode-a
            launch: {flags: {speed: 20, enable_metrics: true, disaggregation_mode: decode}}
          - name: decode-b
            launch: {flags: {speed: 20, enable_metrics: true, disaggregation_mode: decode}}
        gateway: {name: pd, policy: round_robin}
        ramp: {levels: [4, 8], input_len: 1024, output_len: 128, level_duration_s: 60, settle_s: 15}
        """ % free_port()))
    out = tmp_path / "session"
    p = subprocess.run([sys.executable, "-m", "specmon", "launch", str(path), "--headless", "--out", str(out)],
                       cwd=str(REPO), capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    header = (out / "logs" / "pd.log").read_text().splitlines()[0]
    assert "--pd-disaggregation --prefill http://127.0.0.1:" in header and header.count("--decode ") == 2
    meta = json.loads((out / "session.json").read_text())
    assert {a["name"]: a["role"] for a in meta["arms"]} == {"prefill": "prefill", "decode-a": "decode",
                                                            "decode-b": "decode"}
    with open(out / "levels.csv", newline="") as f:
        levels = list(csv.DictReader(f))
    fleet = [r for r in levels if not r["worker"]]
    assert [r["arm"] for r in fleet] == ["pd", "pd"] and all(int(r["ok"]) > 0 for r in fleet)
    top = {r["arm"]: r for r in levels if r["worker"] and r["level"] == "1"}
    # the decode workers hold the running requests and make the tokens; the prefill worker answers
    # the first token of each and holds little
    assert float(top["decode-a"]["output_tok_s"]) > 0 and float(top["decode-b"]["output_tok_s"]) > 0
    assert float(top["prefill"]["running_mean"]) < float(top["decode-a"]["running_mean"])
    assert top["prefill"]["ttft_p50_s"] != ""
    # the imbalance compares the two decode workers, not the prefill worker with them
    f = meta["fleet_levels"]["pd"]
    assert f["busiest"]["1"] in ("decode-a", "decode-b") and f["imbalance"]["1"] < 2.0


@pytest.mark.skipif(not have_gateway(), reason="smg (pip install smg) is not installed")
def test_kill_9_of_specmon_leaves_no_smg_and_launch_runs_the_smg_first_on_path_with_the_admin_key(tmp_path):
    """The operator's smg first on PATH is the one launched (its binary and version said in the log
    and session.json); --gateway-key-env starts it with that admin key and reads it with it, the key
    in no file; kill -9 of specmon (nothing of it runs) still stops the router and every worker."""
    from helpers.gatewayproc import SMG

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "smg"
    # a "newer" smg: says another version, runs the real one (exec: the same process, the router)
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "smg 1.99.0"; exit 0; }}\nexec {SMG} "$@"\n')
    wrapper.chmod(0o755)
    key = "adm-" + "5e1d0c9b7a3f"
    path = tmp_path / "gw.yaml"
    path.write_text(SIM + textwrap.dedent("""
        interval_s: 0.5
        arms:
          - {name: w1, launch: {flags: {speed: 20, enable_metrics: true}}}
          - {name: w2, launch: {flags: {speed: 20, enable_metrics: true, dp_size: 2}}}
        gateway: {name: gw, policy: round_robin}
        """))
    out = tmp_path / "session"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", SPECMON_TEST_ADMIN=key)
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "launch", str(path), "--headless", "--out", str(out),
                             "--gateway-key-env", "SPECMON_TEST_ADMIN"],
                            cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("gw: ready"):
                break
        assert any(ln.startswith("gw: ready (/workers lists its 2 workers healthy)") for ln in lines), "".join(lines)
        time.sleep(2.0)  # a few ticks through the gateway, with the key
        groups = group_pids(out / "logs")
        assert set(groups) == {"w1", "w2", "gw"}
        router = psutil.Process(groups["gw"])
        assert router.is_running() and os.getsid(router.pid) == router.pid  # a session of its own
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # nothing of specmon ran: the kernel (parent-death signal) and the reaper stop them
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(group_members(g) for g in groups.values()):
        time.sleep(0.2)
    assert {n: group_members(g) for n, g in groups.items()} == {n: [] for n in groups}
    assert not router.is_running() or router.status() == psutil.STATUS_ZOMBIE
    log = (out / "logs" / "gw.log").read_text()
    assert f"----- specmon: gateway: {wrapper} (smg 1.99.0)" in log.splitlines()[2]
    assert "--control-plane-api-keys 'specmon:specmon:admin:***'" in log.splitlines()[0]
    meta = json.loads((out / "session.json").read_text())
    assert meta["gateway"] == {"binary": str(wrapper), "version": "smg 1.99.0"}
    for f in out.rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f
    assert key not in "".join(lines)

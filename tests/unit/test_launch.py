"""Launch mode end to end, with `specmon sim` started in place of SGLang through the layout's
`command:` override: real processes, real HTTP, real process groups."""

import asyncio
import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from specmon.errors import ServerError
from specmon.model import ArmPhase, LogLine
from specmon.servers.launch import Supervisor
from specmon.servers.layout import load_layout, parse_layout
from specmon.sources import logparse as lp

import realsglang as rs
from simproc import group_pids

REPO = Path(__file__).resolve().parent.parent
SIM = "command: [python, -m, specmon.servers.sim]\nstartup_timeout_s: 60\n"


def layout_of(text: str):
    head, sep, body = text.partition("arms:")
    return parse_layout(textwrap.dedent(head) + sep + textwrap.dedent(body), "test.yaml", env={})[0]


def run_specmon(*args, cwd, timeout=240):
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def gone(pids, timeout=10.0) -> list[int]:
    """Pids still alive (zombies count as gone: they hold nothing) after waiting up to timeout."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    return alive


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


async def test_startup_crash_fails_one_arm_other_continues(tmp_path):
    layout = layout_of(SIM + """
        arms:
          - name: good
            launch: {flags: {profile: fp8-mtp, speed: 50}}
          - name: bad
            launch: {flags: {profile: fp8-mtp, drafter: nosuch}}
          - name: oom
            launch: {command: [python, -c, "import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', flush=True); sys.exit(1)"]}
        """)
    events = []
    sup = Supervisor(layout, tmp_path)
    try:
        await sup.start(events.append)
        failed = sup.failed()
        assert set(failed) == {"bad", "oom"}
        assert failed["bad"] == "unknown drafter 'nosuch'; known: none, mtp, dflash, dspark"
        assert failed["oom"] == "CUDA out of memory"
        assert sup.launched["good"].ready
        phases = [(e.arm, e.phase) for e in events if isinstance(e, ArmPhase)]
        assert ("good", "ready") in phases and ("bad", "failed") in phases
        assert any(isinstance(e, LogLine) and e.arm == "bad" for e in events)
    finally:
        sup.stop()


async def test_every_arm_failing_is_a_server_error_with_the_cause(tmp_path):
    layout = layout_of(SIM + """
        arms:
          - name: bad
            launch: {flags: {profile: no-such-profile}}
        """)
    sup = Supervisor(layout, tmp_path)
    with pytest.raises(ServerError, match=r"arm 'bad' \(http://127.0.0.1:\d+\) failed: .*no-such-profile"):
        await sup.start(lambda e: None)
    sup.stop()


def test_cli_all_failed_exit_3(tmp_path):
    (tmp_path / "x.yaml").write_text(SIM + "arms:\n  - name: bad\n    launch: {flags: {drafter: nosuch}}\n")
    r = run_specmon("launch", "x.yaml", "--headless", "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert "bad" in r.stderr and "unknown drafter" in r.stderr and "Traceback" not in r.stderr


async def test_port_in_use(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    layout = layout_of(SIM + f"""
        arms:
          - name: taken
            launch: {{port: {port}, flags: {{profile: fp8-mtp}}}}
          - name: free
            launch: {{flags: {{profile: fp8-mtp, speed: 50}}}}
        """)
    sup = Supervisor(layout, tmp_path)
    try:
        await sup.start(lambda e: None)
        assert sup.failed()["taken"].startswith(f"port in use: 127.0.0.1:{port}")
        assert sup.launched["taken"].proc is None  # refused before starting anything
        assert sup.launched["free"].ready
    finally:
        sup.stop()
        holder.close()


async def test_startup_timeout_kills_the_server(tmp_path):
    layout = layout_of("""
        arms:
          - name: slow
            launch:
              command: [python, -c, "import time; print('Load weight begin. avail mem=1.00 GB', flush=True); time.sleep(600)"]
              startup_timeout_s: 1.5
        """)
    events = []
    sup = Supervisor(layout, tmp_path, grace_s=2)
    try:
        with pytest.raises(ServerError, match=r"not ready within 1.5 s .*last phase: loading weights"):
            await sup.start(events.append)
        pid = sup.launched["slow"].proc.pid
        assert gone([pid]) == []
    finally:
        sup.stop()


async def test_mid_ramp_crash_fails_that_arm_only(tmp_path):
    """A server that dies while serving: its arm fails with the cause, the other keeps serving;
    a restart (between levels) brings it back."""
    import httpx

    layout = layout_of(SIM + """
        arms:
          - name: crashy
            launch: {flags: {profile: fp8-mtp, speed: 100, fault_crash_after: 2}}
          - name: steady
            launch: {flags: {profile: fp8-mtp, speed: 100}}
        """)
    events = []
    sup = Supervisor(layout, tmp_path)
    try:
        await sup.start(events.append)
        urls = {a.name: a.url for a in sup.arms}
        body = {"input_ids": [1] * 64, "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(3):
                try:
                    await client.post(urls["crashy"] + "/generate", json=body)
                except httpx.HTTPError:
                    pass
            for _ in range(40):
                if sup.failed():
                    break
                await asyncio.sleep(0.25)
            assert "crashy" in sup.failed() and "Fault injection" in " ".join(sup.launched["crashy"].tail)
            failed_events = [e for e in events if isinstance(e, ArmPhase) and e.phase == "failed"]
            assert [e.arm for e in failed_events] == ["crashy"] and failed_events[0].detail
            r = await client.post(urls["steady"] + "/generate", json=body)
            assert r.status_code == 200
            # the Sample for the dead arm says failed, with the cause
            from specmon.model import Sample

            s = sup.fill_from_log(Sample(ts=time.time(), arm="crashy", up=False, state="refused"))
            assert s.state == "failed" and s.reason == sup.failed()["crashy"]
            await sup.restart(events.append)
            assert not sup.failed()
            r = await client.post(urls["crashy"] + "/generate", json=body)
            assert r.status_code == 200
    finally:
        sup.stop()


async def test_log_source_fills_a_scrape(tmp_path):
    """Without --enable-metrics the log lines give running/queue/usage/throughput/accept length."""
    import httpx

    from specmon.model import Sample

    layout = layout_of(SIM + """
        arms:
          - name: a
            launch: {flags: {profile: fp8-mtp, speed: 50, decode_log_interval: 5}}
        """)
    sup = Supervisor(layout, tmp_path)
    try:
        await sup.start(lambda e: None)
        url = sup.arms[0].url
        body = {"input_ids": [1] * 200, "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
        async with httpx.AsyncClient(timeout=60) as client:
            await asyncio.gather(*(client.post(url + "/generate", json=body) for _ in range(4)))
        # The log is read by a thread: wait until it has caught up with the file's last
        # "Decode batch" line, then the Sample must say what that line says.
        import re

        def last_decode() -> dict:
            lines = [x for x in (sup.log_dir / "a.log").read_text().splitlines() if "Decode batch" in x]
            m = re.search(r"#running-req: (\d+).*accept len: ([\d.]+).*gen throughput \(token/s\): ([\d.]+), "
                          r"#queue-req: (\d+)", lines[-1])
            return {"running": int(m[1]), "accept": float(m[2]), "tps": float(m[3]), "queue": int(m[4])}

        for _ in range(100):
            s = sup.fill_from_log(Sample(ts=time.time(), arm="a", up=True))
            want = last_decode()
            if s.accept_length == want["accept"] and s.gen_tok_s == want["tps"]:
                break
            await asyncio.sleep(0.1)
        assert s.source == "log"
        assert s.kv_capacity_tokens == 175000 and s.gen_tok_s is not None and s.gen_tok_s > 0
        assert (s.accept_length, s.gen_tok_s) == (want["accept"], want["tps"]) and s.spec_enabled is True
        # accept len is tokens per verify pass: between 1 (nothing accepted) and the 4 draft tokens
        assert 1.0 <= s.accept_length <= 4.0
        assert s.running_reqs is not None and s.queued_reqs is not None
    finally:
        sup.stop()


# ---- SGLang's own start-up failures, replayed from the real logs in tests/data -----------------

DATA = REPO / "tests" / "data"
# Prints a real SGLang log (its port number replaced by the one specmon gave, with "own"), then
# lives on deaf to SIGTERM, as SGLang 0.5.10 does after failing to bind its port; "exit N" ends
# with that code after the lines instead.
REPLAY = "\n".join([
    "import signal, sys, time",
    "path, mode = sys.argv[1], sys.argv[2]",
    "port = sys.argv[sys.argv.index('--port') + 1]",
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
    "for line in open(path):",
    "    print(line.rstrip('\\n').replace('39113', port) if mode == 'own' else line.rstrip('\\n'), flush=True)",
    "if mode.startswith('exit'):",
    "    sys.exit(int(mode.split()[1]))",
    f"if mode == 'other':\n    print({lp.READY_TEXT!r}, flush=True)",
    "time.sleep(600)",
])


def replay_arm(name: str, fixture: str, mode: str) -> str:
    return (f"  - name: {name}\n    launch:\n      command: [python, -c, {json.dumps(REPLAY)}, "
            f"{json.dumps(str(DATA / fixture))}, {json.dumps(mode)}]\n")


async def test_bind_error_after_loading_fails_the_arm_at_once(tmp_path):
    """SGLang's bind error on the arm's own port (after loading weights) fails the arm as soon as
    the line appears, named, instead of minutes later as "exited with code -9"; the same line about
    another port is not this server's failure."""
    layout = parse_layout("startup_timeout_s: 60\narms:\n" + replay_arm("taken", "sglang_real_bind_in_use.log", "own")
                          + replay_arm("other", "sglang_real_bind_in_use.log", "other"), "t.yaml", env={})[0]
    sup = Supervisor(layout, tmp_path, grace_s=2)
    try:
        t0 = time.monotonic()
        await sup.start(lambda e: None)
        took = time.monotonic() - t0
        port = sup.launched["taken"].port
        assert sup.failed() == {"taken": f"port {port} already in use (SGLang could not bind 127.0.0.1:{port}; "
                                         "another process holds it)"}
        assert took < 15, took  # the line, then TERM (ignored) and KILL 2 s later
        assert gone([sup.launched["taken"].proc.pid]) == []
        assert sup.launched["other"].ready
    finally:
        sup.stop()


async def test_speculative_assert_named(tmp_path):
    layout = parse_layout("arms:\n" + replay_arm("spec", "sglang_real_spec_assert.log", "exit 1"), "t.yaml", env={})[0]
    sup = Supervisor(layout, tmp_path)
    try:
        with pytest.raises(ServerError, match="SGLang rejected the speculative-decoding arguments"):
            await sup.start(lambda e: None)
        assert sup.failed()["spec"].startswith(
            "SGLang rejected the speculative-decoding arguments: and self.speculative_num_draft_tokens is None "
            "(server_args.py line 3056)")
    finally:
        sup.stop()


# ---- shutdown: no orphans ------------------------------------------------------------------

GRANDCHILD = """
        arms:
          - name: a
            launch:
              # a grandchild in the server's group, like SGLang's scheduler/detokenizer processes
              command: [bash, -c, 'sleep 300 & exec {py} -m specmon.servers.sim "$@"', sim]
              flags: {{profile: fp8-mtp, speed: 50}}
          - name: b
            launch: {{flags: {{profile: nvfp4-mtp, speed: 50}}}}
"""


async def test_stop_kills_every_process_of_every_group(tmp_path):
    layout = layout_of(SIM + GRANDCHILD.format(py=sys.executable))
    sup = Supervisor(layout, tmp_path, grace_s=3)
    await sup.start(lambda e: None)
    pids = [p for a in sup.launched.values() for p in group_pids(a.proc.pid)]
    assert len(pids) >= 3  # bash->sim, its sleep, and b
    sup.stop()
    sup.stop()  # idempotent
    assert gone(pids) == []


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


def test_sigterm_during_startup_stops_at_once(tmp_path):
    """A server still loading (minutes on a GPU) must not hold up Ctrl-C/SIGTERM."""
    (tmp_path / "x.yaml").write_text(textwrap.dedent("""
        arms:
          - name: slow
            launch:
              command: [python, -c, "import time; print('Load weight begin. avail mem=1.00 GB', flush=True); time.sleep(600)"]
        """))
    out_file = open(tmp_path / "out.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "launch", "x.yaml", "--headless", "--out", "s"],
                            cwd=tmp_path, stdout=out_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "loading weights" not in (tmp_path / "out.txt").read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        kids = [k.pid for k in psutil.Process(proc.pid).children(recursive=True)]
        assert kids
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert time.monotonic() - t0 < 15
        assert gone(kids) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_demo_command_short(tmp_path):
    """`specmon demo` from the packaged layout with CLI overrides: both arms, every level recorded."""
    r = run_specmon("demo", "--headless", "--levels", "4,8", "--level-duration", "40", "--speed", "40",
                    "--out", str(tmp_path / "d"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    levels = read_csv(tmp_path / "d" / "levels.csv")
    assert sorted((row["arm"], row["offered_concurrency"]) for row in levels) == [
        ("fp8-mtp", "4"), ("fp8-mtp", "8"), ("nvfp4-mtp", "4"), ("nvfp4-mtp", "8")]
    assert "--speed 40" in (tmp_path / "d" / "logs" / "fp8-mtp.log").read_text().splitlines()[0]


# ---- the real SGLang server (CPU engine): tests/realsglang.py says where it lives -------------


def real_env() -> dict[str, str]:
    return dict(os.environ, SPECMON_SGLANG_VENV=str(rs.SGLANG_VENV), SPECMON_REAL_SGLANG_DIR=str(rs.REAL_DIR))


@pytest.mark.real_sglang
@pytest.mark.skipif(rs.missing() is not None, reason=rs.missing() or "")
@pytest.mark.timeout(900)
async def test_real_sglang_layout_phases_restart_and_group_kill(tmp_path):
    """The shipped layouts/real-sglang-cpu.yaml: `python -m sglang.launch_server` from the venv named
    by $SPECMON_SGLANG_VENV, phases from SGLang's own lines, the KV pool from the log, a restart
    (as between levels) whose first server's processes are all gone, and stop() taking down the
    scheduler and detokenizer processes too."""
    env = real_env()
    layout, warnings = load_layout(REPO / "layouts" / "real-sglang-cpu.yaml", env=env)
    assert not warnings
    events = []
    sup = Supervisor(layout, tmp_path, grace_s=15, env=env)
    first: list[int] = []
    pids: list[int] = []
    try:
        await sup.start(events.append)
        a = sup.launched["tiny-cpu"]
        assert a.ready, sup.failed()
        assert a.argv[:3] == [str(rs.SGLANG_PYTHON), "-m", "sglang.launch_server"]
        assert f"{rs.REAL_DIR}/tiny-llama" in a.argv
        phases = [e.phase for e in events if isinstance(e, ArmPhase)]
        for phase in (lp.PHASE_LOADING, lp.PHASE_LOADED, lp.PHASE_KV_POOL, lp.PHASE_HTTP_UP, lp.PHASE_READY):
            assert phase in phases
        assert phases.index(lp.PHASE_LOADING) < phases.index(lp.PHASE_KV_POOL) < phases.index(lp.PHASE_READY)
        from specmon.model import Sample

        s = sup.fill_from_log(Sample(ts=time.time(), arm="tiny-cpu", up=True))
        assert s.kv_capacity_tokens == 8192
        first = group_pids(a.proc.pid)
        assert len(first) >= 3  # launcher, scheduler, detokenizer
        await sup.restart(events.append)
        assert a.ready and a.starts == 2, sup.failed()
        assert gone(first) == []  # the first server left nothing behind
        pids = group_pids(a.proc.pid)
        assert len(pids) >= 3 and not set(pids) & set(first)
        import httpx

        async with httpx.AsyncClient(timeout=60) as c:
            r = await c.post(a.spec.url + "/generate", json={"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}})
        assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 4
    finally:
        sup.stop()
    assert gone(pids) == []
    log = (tmp_path / "logs" / "tiny-cpu.log").read_text()
    assert log.count("----- specmon: start #") == 2 and log.count(lp.READY_TEXT) == 2


@pytest.mark.real_sglang
@pytest.mark.skipif(rs.missing() is not None, reason=rs.missing() or "")
@pytest.mark.timeout(900)
async def test_real_sglang_startup_failures_named(tmp_path):
    """SGLang's own start-up failures, each recognised from its real output and named. The flags go
    through the command (the layout check would refuse them before launch, which is the first line
    of defence); a taken port is refused before anything starts."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    env = real_env()
    base = f"[{rs.SGLANG_PYTHON}, -m, sglang.launch_server"
    common = "--device, cpu, --load-format, dummy"
    model = f"flags: {{model_path: {rs.TINY_MODEL}}}"
    layout, _ = parse_layout(textwrap.dedent(f"""
        startup_timeout_s: 300
        arms:
          - name: kvdtype
            launch: {{command: {base}, --kv-cache-dtype, fp3, {common}], {model}, env: {{SGLANG_USE_CPU_ENGINE: 1, HF_HUB_OFFLINE: 1}}}}
          - name: quant
            launch: {{command: {base}, --quantization, nosuchq, {common}], {model}, env: {{SGLANG_USE_CPU_ENGINE: 1, HF_HUB_OFFLINE: 1}}}}
          - name: nomodel
            launch: {{command: {base}, {common}], flags: {{model_path: {tmp_path}/no-such-model}},
                      env: {{SGLANG_USE_CPU_ENGINE: 1, HF_HUB_OFFLINE: 1}}}}
          - name: taken
            launch: {{port: {port}, command: {base}, {common}], {model}, env: {{SGLANG_USE_CPU_ENGINE: 1, HF_HUB_OFFLINE: 1}}}}
        """), "failures.yaml", env=env)
    sup = Supervisor(layout, tmp_path, grace_s=10, env=env)
    try:
        with pytest.raises(ServerError) as err:
            await sup.start(lambda e: None)
        failed = sup.failed()
    finally:
        sup.stop()
        holder.close()
    print(failed)
    assert failed["taken"].startswith(f"port in use: 127.0.0.1:{port}") and sup.launched["taken"].proc is None
    assert failed["kvdtype"].startswith("bad flag: argument --kv-cache-dtype: invalid choice: 'fp3'")
    assert failed["quant"].startswith("bad flag: argument --quantization: invalid choice: 'nosuchq'")
    assert failed["nomodel"].startswith("model path not found")
    # --mem-fraction-static 1.5 is not tried on the real server here: SGLang does not reject it, its
    # scheduler asks for more memory than the machine has and the OOM killer ends it (seen once;
    # tests/test_real_sglang_facts.py keeps those lines). The layout check refuses it before launch.
    assert "kvdtype" in str(err.value) and "Traceback" not in str(err.value)


@pytest.mark.real_sglang
@pytest.mark.skipif(rs.missing() is not None, reason=rs.missing() or "")
@pytest.mark.timeout(900)
async def test_real_sglang_bind_error_speculative_assert_and_key(tmp_path):
    """Real SGLang 0.5.10: (a) its port taken while it loads (a socket bound once specmon has checked
    the port and is starting it): the bind error is named and the arm fails right after the line,
    not after SGLang's minutes of warm-up retries; (b) EAGLE with --speculative-eagle-topk and no
    --speculative-num-steps: SGLang's bare assert, named; (c) a server started with
    `api_key: ${VAR}`: its server_args line shows api_key='***' and no file of the folder has the key."""
    key = "sk-real-sglang-test-4d1c"
    env = dict(real_env(), REAL_TEST_KEY=key)
    cpu = "env: {SGLANG_USE_CPU_ENGINE: 1, HF_HUB_OFFLINE: 1}"
    common = f"model_path: {rs.TINY_MODEL}, device: cpu, load_format: dummy, max_total_tokens: 8192"
    layout, _ = parse_layout(textwrap.dedent(f"""
        command: [{rs.SGLANG_PYTHON}, -m, sglang.launch_server]
        startup_timeout_s: 600
        arms:
          - name: bind
            launch: {{flags: {{{common}}}, {cpu}}}
          - name: spec
            launch: {{flags: {{{common}, speculative_algorithm: EAGLE, speculative_eagle_topk: 4}}, {cpu}}}
          - name: keyed
            launch: {{flags: {{{common}, api_key: "${{REAL_TEST_KEY}}"}}, {cpu}}}
        """), "real-failures.yaml", env=env)
    holder = socket.socket()
    seen: dict[str, float] = {}
    leaks = []

    def emit(e):
        if isinstance(e, ArmPhase) and e.arm == "bind" and e.phase == lp.PHASE_STARTING:
            # specmon has found the port free and is starting SGLang: another process takes it now
            holder.bind(("127.0.0.1", sup.launched["bind"].port))
            holder.listen(1)
        if isinstance(e, ArmPhase) and e.arm == "bind" and e.phase == lp.PHASE_FAILED:
            seen["failed"] = time.monotonic()
        if key in (getattr(e, "line", None) or "") or key in (getattr(e, "detail", None) or ""):
            leaks.append(e)

    async def watch_log():
        log = tmp_path / "logs" / "bind.log"
        while "line" not in seen:
            if log.exists() and "error while attempting to bind" in log.read_text(errors="replace"):
                seen["line"] = time.monotonic()
            await asyncio.sleep(0.05)

    sup = Supervisor(layout, tmp_path, grace_s=15, env=env)
    watcher = asyncio.create_task(watch_log())
    try:
        await sup.start(emit)
        failed = sup.failed()
        bind_pids = [sup.launched["bind"].proc.pid]
        assert sup.launched["keyed"].ready, failed
    finally:
        watcher.cancel()
        sup.stop()
        holder.close()
    assert leaks == []
    port = sup.launched["bind"].port
    print(failed, f"bind line -> arm failed: {seen['failed'] - seen['line']:.2f} s")
    assert failed["bind"] == f"port {port} already in use (SGLang could not bind 127.0.0.1:{port}; another process holds it)"
    assert seen["failed"] - seen["line"] < 10  # SGLang itself would go on for up to 12 minutes
    assert gone(bind_pids) == []
    assert failed["spec"].startswith("SGLang rejected the speculative-decoding arguments: ")
    # the assert's file: server_args.py (0.5.10), arg_groups/speculative_hook.py (0.5.23)
    assert re.search(r"(server_args|speculative_hook)\.py line", failed["spec"]) and "--speculative-num-steps" in failed["spec"]
    keyed_log = (tmp_path / "logs" / "keyed.log").read_text()
    # server_args printed as ServerArgs(api_key=...) (0.5.10) or as a dict (0.5.23)
    assert ("api_key='***'" in keyed_log or "'api_key': '***'" in keyed_log) and "--api-key '***'" in keyed_log.splitlines()[0]
    assert [p for p in tmp_path.rglob("*") if p.is_file() and key.encode() in p.read_bytes()] == []

"""Launch mode end to end, with `specmon sim` started in place of SGLang through the layout's
`command:` override: real processes, real HTTP, real process groups."""

import asyncio
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
from specmon.servers.layout import parse_layout

from helpers.launch import SIM, gone, layout_of, replay_arm

REPO = Path(__file__).resolve().parents[2]




# --------------------------------------------------------------------------------------------


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


# ---- shutdown: no orphans (the kill of every group is in tests/e2e/test_launch_supervised.py) ---

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

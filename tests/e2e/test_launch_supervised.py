"""The supervisor with real processes past start-up: a server that dies mid-ramp fails its arm
alone and comes back on restart; SGLang's bind error (replayed from a real log) fails its arm
at once; stopping leaves no process of any group behind. Seconds each (they start and kill
servers), so they run in the e2e tier; the unit tier keeps the start-up failures."""

from __future__ import annotations

import asyncio
import sys
import time

from specmon.model import ArmPhase
from specmon.servers.launch import Supervisor
from specmon.servers.layout import parse_layout

from helpers.launch import GRANDCHILD, SIM, gone, layout_of, replay_arm
from helpers.simproc import group_pids


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


async def test_stop_kills_every_process_of_every_group(tmp_path):
    layout = layout_of(SIM + GRANDCHILD.format(py=sys.executable))
    sup = Supervisor(layout, tmp_path, grace_s=3)
    await sup.start(lambda e: None)
    pids = [p for a in sup.launched.values() for p in group_pids(a.proc.pid)]
    assert len(pids) >= 3  # bash->sim, its sleep, and b
    sup.stop()
    sup.stop()  # idempotent
    assert gone(pids) == []

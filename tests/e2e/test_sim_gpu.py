"""The simulated GPU: what `specmon sim` says the card it simulates holds (GET /specmon/simulated_gpu),
shown for simulated arms only, labelled simulated, through the GPU widgets, recorded in gpus.csv
and replayed the same way; a server that does not say it is the simulator is never asked."""

from __future__ import annotations

import asyncio
import time
import csv
import re
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.badserver import BadServer  # noqa: E402
from helpers.gatewayproc import RecordingProxy  # noqa: E402
from helpers.simproc import start_sim  # noqa: E402

from specmon.model import ArmSpec, SamplesTick  # noqa: E402
from specmon.session.live import LiveSession  # noqa: E402
from specmon.session.replay import ReplaySource  # noqa: E402
from specmon.tui.app import SpecmonApp  # noqa: E402
from specmon.tui.widgets.arm_panel import ArmPanel  # noqa: E402
from specmon.tui.widgets.gpu_strip import GpuStrip  # noqa: E402
from helpers.sim_gpu import gpu_text, text, wait_for

MIB = 2**20
PATH = "/specmon/simulated_gpu"


def gpu_of(url: str) -> dict:
    doc = httpx.get(url + PATH, timeout=10, trust_env=False).json()
    assert doc["simulated"] is True and len(doc["gpus"]) == 1
    return doc["gpus"][0]


def idle_gpu_of(url: str, timeout: float = 30.0) -> dict:
    """The card once no pass has run for a whole utilization window (the last reading if never)."""
    deadline = time.monotonic() + timeout
    g = gpu_of(url)
    while g["utilization_pct"] != 0.0 and time.monotonic() < deadline:
        time.sleep(0.1)
        g = gpu_of(url)
    return g


async def _stream(client: httpx.AsyncClient, url: str, stop: asyncio.Event) -> None:
    body = {"input_ids": list(range(1, 2049)), "sampling_params": {"max_new_tokens": 4096, "ignore_eos": True},
            "stream": True}
    while not stop.is_set():
        async with client.stream("POST", url + "/generate", json=body) as r:
            async for _ in r.aiter_bytes():
                if stop.is_set():
                    return


async def load(url: str, n: int, stop: asyncio.Event) -> None:
    """n streams held open against one server until `stop` (load that does not end by itself)."""
    async with httpx.AsyncClient(timeout=300, trust_env=False) as c:
        await asyncio.gather(*(_stream(c, url, stop) for _ in range(n)), return_exceptions=True)


# ---------------------------------------------------------------------------------------------
# The simulator's side


async def test_the_simulator_publishes_its_card_fp8_has_the_smaller_pool_and_power_rises_with_load():
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=20, timeout=90) as fp8, \
         start_sim("--enable-metrics", "--profile", "nvfp4-mtp", speed=20, timeout=90) as fp4:
        # the server's warmup request (SGLang's, at start) leaves the utilization window after
        # WINDOW_S simulated seconds: read the cards once it has
        a, b = idle_gpu_of(fp8.url), idle_gpu_of(fp4.url)
        info = {u: httpx.get(u + "/server_info", timeout=10, trust_env=False).json() for u in (fp8.url, fp4.url)}
        for g, url in ((a, fp8.url), (b, fp4.url)):
            assert g["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
            assert g["memory_total_bytes"] == 97_887 * MIB  # what nvidia-smi shows for the 96 GB card
            # the pool the server reports: its token capacity x 256 KiB of FP8 KV a token
            assert g["kv_pool_tokens"] == info[url]["max_total_num_tokens"]
            assert g["kv_pool_bytes"] == info[url]["max_total_num_tokens"] * 2 * 64 * 8 * 256
            parts = g["weights_bytes"] + g["kv_pool_bytes"] + g["cuda_graph_bytes"] + g["activations_bytes"] \
                + g["context_bytes"]
            assert g["memory_used_bytes"] == parts < g["memory_total_bytes"]
            # weights + pool within the static share the server was started with
            assert g["weights_bytes"] + g["kv_pool_bytes"] <= 0.85 * g["memory_total_bytes"]
            assert g["utilization_pct"] == 0.0 and 20 <= g["power_w"] <= 60 and g["power_limit_w"] == 600
        # the memory half of FP8 vs NVFP4: smaller weights leave a bigger pool
        assert a["weights_bytes"] > b["weights_bytes"] and a["kv_pool_bytes"] < b["kv_pool_bytes"]
        assert a["kv_pool_tokens"] == 175_000 < b["kv_pool_tokens"]
        idle = a["power_w"]
        stop = asyncio.Event()
        task = asyncio.ensure_future(load(fp8.url, 16, stop))
        try:
            busy = None
            for _ in range(100):
                await asyncio.sleep(0.1)
                busy = await asyncio.to_thread(gpu_of, fp8.url)
                if busy["utilization_pct"] > 90:
                    break
            assert busy["utilization_pct"] > 90, busy
            assert idle + 150 < busy["power_w"] <= 600, (idle, busy)
            assert busy["temperature_c"] > a["temperature_c"]
            assert busy["memory_used_bytes"] == a["memory_used_bytes"]  # pools allocated at startup
            assert (await asyncio.to_thread(gpu_of, fp4.url))["power_w"] == b["power_w"]  # the other card idles
        finally:
            stop.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


# ---------------------------------------------------------------------------------------------
# specmon's side


async def test_simulated_arms_show_their_simulated_card_in_the_gpu_panes(tmp_path):
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=20, timeout=90) as fp8, \
         start_sim("--enable-metrics", "--profile", "nvfp4-mtp", speed=20, timeout=90) as fp4:
        arms = [ArmSpec(name="fp8-mtp", url=fp8.url), ArmSpec(name="nvfp4-mtp", url=fp4.url)]
        live = LiveSession(arms, interval=0.3, out_dir=tmp_path / "s", mode="attach")
        app = SpecmonApp(live, "live")
        stop = asyncio.Event()
        async with app.run_test(size=(160, 48)) as pilot:
            def sim_last(arm):
                s = app.state.arm(arm).last
                return s if s is not None and s.gpu_source == "simulated" else None

            await wait_for(pilot, lambda: sim_last("fp8-mtp") and sim_last("nvfp4-mtp"), what="simulated GPUs")
            idle_w = sim_last("fp8-mtp").gpu_power_w
            task = asyncio.ensure_future(load(fp8.url, 16, stop))
            try:
                await wait_for(pilot, lambda: (sim_last("fp8-mtp").gpu_power_w or 0) > idle_w + 150,
                               what="power under load")
                await pilot.pause(0.3)
                panels = {p.arm_name: p for p in app.query(ArmPanel)}
                shown = {a: gpu_text(p) for a, p in panels.items()}
                for a, t in shown.items():
                    assert "simulated" in t and "/95.6 GiB" in t and " W" in t, t
                    assert "NVML" not in t and "no GPU reading" not in t
                # the pane says what holds the memory: FP8's weights 25.1 GiB and pool 42.7 GiB,
                # NVFP4's 19.6 and 51.7 (smaller weights, bigger pool)
                assert re.search(r"weights 25\.1 .*KV( pool)? 42\.7", shown["fp8-mtp"]), shown
                assert re.search(r"weights 19\.6 .*KV( pool)? 51\.7", shown["nvfp4-mtp"]), shown
                sim = {g.arm: g for g in app.state.gpus.simulated_gpus}
                assert sim["fp8-mtp"].kv_pool_bytes < sim["nvfp4-mtp"].kv_pool_bytes
                assert sim["fp8-mtp"].power_w > sim["nvfp4-mtp"].power_w
                strip = text(app.query_one(GpuStrip))
                assert "simulated:" in strip and "fp8-mtp" in strip and "nvfp4-mtp" in strip, strip
                if not app.state.gpus.available:  # no driver here: said once, on the GPU line only
                    assert strip.count("NVIDIA driver") == 1
            finally:
                stop.set()
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await pilot.press("q")
    # recorded: gpus.csv rows marked simulated with their arm; samples.csv says where gpu_* came from
    rows = list(csv.DictReader(open(tmp_path / "s" / "gpus.csv")))
    sim_rows = [r for r in rows if r["source"] == "simulated"]
    assert {r["arm"] for r in sim_rows} == {"fp8-mtp", "nvfp4-mtp"}
    assert all(r["mem_total_bytes"] == str(97_887 * MIB) for r in sim_rows)
    samples = [r for r in csv.DictReader(open(tmp_path / "s" / "samples.csv")) if r["gpu_mem_used_bytes"]]
    assert samples and all(r["gpu_source"] == "simulated" for r in samples)
    # and replay shows them the same way: from events.jsonl, and rebuilt from the CSVs alone
    for folder in (tmp_path / "s", _without_event_log(tmp_path / "s", tmp_path / "csv-only")):
        src = ReplaySource(folder, speed=1e9)
        ticks = [e for e in src.events if isinstance(e, SamplesTick) and e.gpus is not None and e.gpus.simulated_gpus]
        assert ticks and {g.arm for g in ticks[-1].gpus.simulated_gpus} == {"fp8-mtp", "nvfp4-mtp"}
        assert all(g.weights_bytes and g.kv_pool_bytes for g in ticks[-1].gpus.simulated_gpus)
        app = SpecmonApp(src, title="replay")
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.query_one("StatusBar").stopped is not None, what="replay end")
            await pilot.pause(0.2)
            panels = list(app.query(ArmPanel))
            assert panels and not any(p.compact for p in panels)
            for p in panels:
                assert "simulated" in p.part_text("gpu") and "KV" in p.part_text("gpu"), p.part_text("gpu")
            assert "simulated:" in text(app.query_one(GpuStrip))


def _without_event_log(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    (dst / "events.jsonl").unlink()
    return dst


async def _attach_ticks(arms, out: Path, ticks: int) -> None:
    live = LiveSession(arms, interval=0.3, out_dir=out, mode="attach")
    stop = asyncio.Event()
    seen: list = []

    def emit(e):
        seen.append(e)
        if isinstance(e, SamplesTick) and sum(isinstance(x, SamplesTick) for x in seen) >= ticks:
            stop.set()

    await asyncio.wait_for(live.run(emit, stop), timeout=60)


async def test_a_server_that_does_not_say_it_is_the_simulator_is_never_asked(tmp_path):
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=20, timeout=90) as sim:
        # control: through a recording proxy, the simulator is asked for its card
        proxy = RecordingProxy(sim.url)
        try:
            await _attach_ticks([ArmSpec(name="sim", url=proxy.url)], tmp_path / "a", ticks=8)
        finally:
            proxy.close()
        assert ("GET", PATH) in proxy.requests, proxy.requests
        # a server answering exactly what the simulator does, less the key by which it says it is
        # the simulator (as real SGLang answers): never asked, and its arm gets no GPU figures
        info = httpx.get(sim.url + "/server_info", timeout=10, trust_env=False).json()
    real_like = {k: v for k, v in info.items() if not k.startswith("sim_")}
    with BadServer() as srv:
        srv.server_info = real_like
        await _attach_ticks([ArmSpec(name="sglang", url=srv.url)], tmp_path / "b", ticks=8)
        paths = [r.split(" ", 1)[1] for r in srv.requests]
    assert any(p.startswith("/server_info") for p in paths) and any(p.startswith("/metrics") for p in paths)
    assert not [p for p in paths if p.startswith("/specmon")], paths
    rows = list(csv.DictReader(open(tmp_path / "b" / "gpus.csv")))
    assert rows and not [r for r in rows if r["source"] == "simulated"]


def test_headless_and_report_label_simulated_gpu_figures(tmp_path):
    import subprocess

    out = tmp_path / "ramp"
    with start_sim("--enable-metrics", "--profile", "nvfp4-mtp", speed=20, timeout=90) as sim:
        p = subprocess.run([sys.executable, "-m", "specmon", "ramp", sim.url, "--levels", "4,8", "--input-len", "1024",
                            "--output-len", "128", "--level-duration", "20", "--settle", "2", "--interval", "0.3",
                            "--headless", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "gpu (simulated) 76.2/96 GiB" in p.stdout
    assert "simulated (the simulator's own figures, not this host's)" in p.stdout and "KV pool 51.7" in p.stdout
    r = subprocess.run([sys.executable, "-m", "specmon", "report", str(out), "--format", "md", "--out",
                        str(tmp_path / "rep")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    md = "\n".join(f.read_text() for f in (tmp_path / "rep").rglob("*.md")) or r.stdout
    assert "GPU power W: simulated" in md, md[:3000]

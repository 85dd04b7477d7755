"""What the TUI costs: the REAL `specmon attach ...` (or `specmon replay ...`) drawing in a real
terminal (tmux, 160x48 by default), its process tree's CPU share of one core and RSS in steady
state, and its time to first paint, for 1 arm, 3 arms, 3 arms x 8 GPUs and a 64-worker fleet table.

    .venv/bin/python benchmarks/ui_cost.py [--cases 1arm,3arm,3arm-gpu,fleet64,...] [--seconds 30]
                                          [--warm 5] [--busy 3] [--speed 1] [--size 160x48]

Cases (each on its own; the servers it needs are started for it and stopped after it):
- idle:       a bare Textual app (one Static, nothing updated): the floor of any Textual screen.
- 1arm:       `specmon attach URL` on one `specmon sim --enable-metrics` (fp8-mtp).
- 3arm:       `specmon attach URL URL URL` on three sims (fp8-mtp, nvfp4-mtp, fp8-nospec).
- 3arm-hl:    the same with --headless (no TUI): the collectors' own share, for comparison.
- 3arm-8gpu:  the three sims with --tp-size 8: each publishes the 8 GPUs it simulates
              (/specmon/simulated_gpu, asked by attach for simulated arms only), so the GPU strip
              and panes show 24 GPUs through the live code path. (-hl: headless.)
- 3arm-rp:    (not by default) `specmon replay` of a 3-arm session recorded by this script.
- 3arm-gpu:   (not by default) `specmon replay` of the same recording with 8 GPUs per arm, from
              before the simulator published GPUs: a LiveSession (attach's own) scrapes the three sims for --record seconds
              with NvmlReplay fed readings built from the real H200 fixture
              tests/data/gpu/h200-2gpu.json (its two GPUs repeated to 24, each GPU a different
              phase on each tick so the figures move), GPUs 8i..8i+7 named for arm i as a layout's
              `gpus:` names them. 3arm-rp is the same events.jsonl with the GPU readings taken
              out, so the two replays differ only by the GPUs.
- fleet64:    `specmon attach GATEWAY` on 64 simulated workers (one `specmon sim --workers 64`)
              behind the real smg gateway (as benchmarks/gateway_fleet.py): the fleet table;
              without smg, the 64 worker URLs with --no-discover.
- fleet64-hl: the same with --headless.

Each case: a closed loop of --busy streams per arm keeps the figures moving (new values every
tick); the TUI starts in a fresh tmux server (its own socket) with the size given; time to first
paint is from just before tmux is asked to start it to the first capture-pane that shows the
status bar ("frame") and then the first arm's figures (its Gen line with a tok/s figure, or a
fleet-table row that is up) ("figures": this includes the first scrape). After --warm seconds
more, CPU (user+system of the process tree, psutil) over --seconds; RSS (tree) every second,
the max and last; the tmux server's own CPU beside it (what the terminal spends parsing what the
TUI writes). Press q at the end; the case fails if the process does not exit.

Measured (2026-12-01 23:29-23:45, the shared 2-core machine, quiet: load 0.1-0.3, --seconds 60;
specmon's bytecode cached, as main() arranges):

  case          CPU %  tmux %  RSS    frame s  figures s
  idle            0.2     0.0   33M     0.24        —
  1arm            1.0     0.1   50M     0.52      1.64
  3arm            1.8     0.1   53M     0.68      1.86
  3arm-hl         0.6       —   31M        —      0.50
  3arm-8gpu       2.2     0.1   53M     0.59      1.74
  3arm-8gpu-hl    0.7       —   31M        —      0.50
  fleet64         3.3     0.1   66M     0.39      1.44
  fleet64-hl      2.7       —   41M        —      0.50

  3arm over seven 60 s runs: 1.6, 1.7, 1.7, 1.8, 1.9, 2.1, 1.9 (one 120 s run: 1.6); with 20 s
  windows earlier the same day 1.8-2.0. The spread is the machine's: the same code, minutes apart.
  Earlier the same day (17:05, every start compiling specmon's sources then): 1arm 1.4%, 3arm
  2.7%, 3arm-8gpu 4.1%, fleet64 6.8%, frame 0.9-1.0 s. What moved it: one widget per arm drawing
  its header, panes and row (the compositor renders 3 arm widgets a tick, not ~24) and
  repainting only lines that read differently; the header's and GPU lines built again only when
  what they read changed; the fleet table's age column showing an age only past the rotation's
  4 s and repainting only changed rows; the gateway's unread series skipped and an unchanged
  /workers body not parsed again; the status bar in the panels' compositor pass.
  Targets: fleet table < 5% met, first paint < 1 s met, 3 arms < 2% in five of seven runs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Optional

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
from helpers.gatewayproc import have_gateway, start_gateway  # noqa: E402
from prometheus_fleet import free_base_port, start_group, stop_group, wait_until  # noqa: E402
from helpers.simproc import free_port, start_sim  # noqa: E402

SPECMON = [sys.executable, "-m", "specmon"]
STATUS_BAR = re.compile(r"^ specmon ", re.M)
PROFILES_3 = ("fp8-mtp", "nvfp4-mtp", "fp8-nospec")
GPU_FIXTURE = REPO / "tests" / "data" / "gpu" / "h200-2gpu.json"
IDLE_APP = ("from textual.app import App\nfrom textual.widgets import Static\n"
            "class A(App):\n    def compose(self):\n        yield Static('idle baseline')\nA().run()\n")


# --------------------------------------------------------------------------------------------
# load: a closed loop per arm so every tick brings new figures


def keep_busy(urls: list[str], stop: threading.Event, streams: int, osl: int = 256) -> None:
    def loop(url: str) -> None:
        with httpx.Client(timeout=300) as c:
            while not stop.is_set():
                with suppress(httpx.HTTPError):
                    c.post(url + "/generate", json={"input_ids": [7] * 1024,
                                                    "sampling_params": {"max_new_tokens": osl, "ignore_eos": True}})
                if stop.is_set():
                    return
    for url in urls:
        for _ in range(streams):
            threading.Thread(target=loop, args=(url,), daemon=True).start()


# --------------------------------------------------------------------------------------------
# tmux


class Tmux:
    """One tmux server of our own (its own socket), one session, one pane running `cmd`."""

    def __init__(self, cmd: list[str], size: tuple[int, int], env: dict[str, str]) -> None:
        self.sock = f"specmon-uicost-{os.getpid()}-{free_port()}"
        self.cmd = cmd
        self.size = size
        self.env = env

    def tmux(self, *args: str, check: bool = True) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def start(self) -> float:
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        # -u PYTHONDONTWRITEBYTECODE: a shell that sets it (this repository's own sandbox did)
        # would have every start compile specmon's sources again, ~0.17 s of a first frame that a
        # user's second start never pays; main() compiles them once before the first case.
        line = (f"cd {shlex.quote(str(REPO))} && exec env -u PYTHONDONTWRITEBYTECODE {envs} "
                f"{shlex.join(self.cmd)}")
        t0 = time.monotonic()
        self.tmux("new-session", "-d", "-s", "b", "-x", str(self.size[0]), "-y", str(self.size[1]), line)
        return t0

    def pane_pid(self) -> int:
        return int(self.tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip())

    def server_pid(self) -> int:
        return int(self.tmux("display-message", "-p", "-t", "b", "#{pid}").strip())

    def capture(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "b", check=False)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "b", *keys, check=False)

    def kill(self) -> None:
        self.tmux("kill-server", check=False)
        sock = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / self.sock
        with suppress(OSError):
            sock.unlink()  # the killed server leaves its socket file behind


def tree(p: psutil.Process) -> list[psutil.Process]:
    with suppress(psutil.Error):
        return [p, *p.children(recursive=True)]
    return []


def start_profile(args, case: str, root: psutil.Process, tmp: Path) -> Optional[subprocess.Popen]:
    """With --profile: py-spy samples the specmon process over the measured window (100 Hz, or
    SPECMON_PYSPY_RATE: 1000 gives a 60 s window of a 0.6% process ~400 samples; without
    stopping it; py-spy's own CPU is outside the measured tree), raw stacks into TMP/CASE.pyspy."""
    if not args.profile:
        return None
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    target = next((q for q in [root, *root.children(recursive=True)] if "python" in q.name().lower()), root)
    out = tmp / f"{case}.pyspy"
    print(f"{case}: py-spy on pid {target.pid} -> {out}", file=sys.stderr)
    return subprocess.Popen([spy, "record", "-p", str(target.pid), "-d", f"{args.seconds:.0f}", "-r", os.environ.get("SPECMON_PYSPY_RATE", "100"),
                             "--nonblocking", "-f", "raw", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def end_profile(spy: Optional[subprocess.Popen]) -> None:
    if spy is not None:
        with suppress(subprocess.TimeoutExpired):
            spy.wait(30)


def tree_cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for q in procs:
        with suppress(psutil.Error):
            t = q.cpu_times()
            total += t.user + t.system
    return total


def tree_rss(procs: list[psutil.Process]) -> int:
    total = 0
    for q in procs:
        with suppress(psutil.Error):
            total += q.memory_info().rss
    return total


GEN_FIGURE = re.compile(r"Gen\s+[\d,.]+ tok/s")


def figures_shown(screen: str, first: Optional[str], fleet: bool) -> bool:
    if fleet:
        return "TTFT p50" in screen and re.search(r"127\.0\.0\.1:\d+\s+│?\s*up\b", screen) is not None \
            or bool(re.search(r"w\d+.*\bup\b", screen))
    if first is not None and first not in screen:
        return False
    return GEN_FIGURE.search(screen) is not None


@dataclasses.dataclass
class Result:
    case: str
    what: str
    cpu: float  # share of one core
    tmux_cpu: Optional[float]
    rss_max: int
    rss_last: int
    frame_s: Optional[float]
    figures_s: Optional[float]
    note: str = ""


def measure_tui(case: str, what: str, cmd: list[str], args, *, first: Optional[str] = None, fleet: bool = False,
                wait_figures: bool = True, quit_key: str = "q", tmp: Path) -> Result:
    w, h = args.size
    t = Tmux(cmd, (w, h), {"TERM": "xterm-256color", "COLORTERM": "truecolor", "PYTHONUNBUFFERED": "1"})
    try:
        t0 = t.start()
        frame_s = figures_s = None
        deadline = t0 + args.paint_timeout
        while time.monotonic() < deadline:
            screen = t.capture()
            now = time.monotonic()
            # The status bar's label (" specmon ", at a line's start): a line the command wrote to
            # stderr before the TUI started ("specmon: ... is a gateway") is not a frame.
            if frame_s is None and (STATUS_BAR.search(screen) or "idle baseline" in screen):
                frame_s = now - t0
            if frame_s is not None and (not wait_figures or figures_shown(screen, first, fleet)):
                figures_s = now - t0 if wait_figures else None
                break
            time.sleep(0.02)
        else:
            (tmp / f"{case}-screen.txt").write_text(t.capture())
            raise RuntimeError(f"{case}: no figures on screen after {args.paint_timeout:g} s; "
                               f"the screen is in {tmp / (case + '-screen.txt')}:\n{t.capture()}")
        root = psutil.Process(t.pane_pid())
        server = psutil.Process(t.server_pid())
        time.sleep(args.warm)
        procs = tree(root)
        spy = start_profile(args, case, root, tmp)
        c0, s0, w0 = tree_cpu(procs), tree_cpu([server]), time.monotonic()
        rss = []
        end = w0 + args.seconds
        while time.monotonic() < end:
            rss.append(tree_rss(tree(root)))
            time.sleep(min(1.0, max(end - time.monotonic(), 0.0)))
        procs = tree(root)
        c1, s1, w1 = tree_cpu(procs), tree_cpu([server]), time.monotonic()
        end_profile(spy)
        rss.append(tree_rss(procs))
        (tmp / f"{case}-screen.txt").write_text(t.capture())
        t.keys(quit_key)
        with suppress(psutil.Error):
            root.wait(20)
        if root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
            raise RuntimeError(f"{case}: the TUI did not exit 20 s after q")
        return Result(case, what, (c1 - c0) / (w1 - w0), (s1 - s0) / (w1 - w0), max(rss), rss[-1], frame_s, figures_s)
    finally:
        t.kill()


def measure_headless(case: str, what: str, cmd: list[str], args, tmp: Path) -> Result:
    out = open(tmp / f"{case}.out", "wb")
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        root = psutil.Process(p.pid)
        wait_until(f"{case}: a first line", lambda: (tmp / f"{case}.out").stat().st_size > 0, args.paint_timeout)
        first = time.monotonic() - t0
        time.sleep(args.warm)
        spy = start_profile(args, case, root, tmp)
        c0, w0 = tree_cpu(tree(root)), time.monotonic()
        rss = []
        while time.monotonic() < w0 + args.seconds:
            rss.append(tree_rss(tree(root)))
            time.sleep(1.0)
        c1, w1 = tree_cpu(tree(root)), time.monotonic()
        end_profile(spy)
        if p.poll() is not None:
            raise RuntimeError(f"{case}: exited {p.returncode}: {(tmp / f'{case}.out').read_text()[-2000:]}")
        return Result(case, what, (c1 - c0) / (w1 - w0), None, max(rss), rss[-1], None, first)
    finally:
        if p.poll() is None:
            p.send_signal(2)
            with suppress(subprocess.TimeoutExpired):
                p.wait(20)
        if p.poll() is None:
            p.kill()
            p.wait()
        out.close()


# --------------------------------------------------------------------------------------------
# the 8-GPU recording


def gpu_readings(n_gpus: int, ticks: int = 12):
    """Snapshots of n_gpus H200s built from the recorded two: GPU i of tick k is the fixture's GPU
    i % 2 in phase (k + i) % phases, so memory and power move from tick to tick."""
    from specmon.sources.nvml import load_fixture

    fixture = load_fixture(GPU_FIXTURE)
    out = []
    for k in range(ticks):
        gpus = []
        for i in range(n_gpus):
            g = fixture[(k + i) % len(fixture)].gpus[i % 2]
            gpus.append(dataclasses.replace(g, index=i, uuid=f"{g.uuid[:-4]}{i:04d}", processes=[]))
        out.append(dataclasses.replace(fixture[0], gpus=gpus))
    return out


def record_3arm_gpu(urls: list[str], seconds: float, out: Path) -> None:
    from specmon.model import ArmSpec
    from specmon.session.live import LiveSession
    from specmon.sources.nvml import NvmlReplay

    names = [f"sim-{p}" for p in PROFILES_3]
    arms = [ArmSpec(name=n, url=u) for n, u in zip(names, urls)]
    live = LiveSession(arms, interval=1.0, out_dir=out, mode="attach", nvml=NvmlReplay(gpu_readings(24)),
                       gpu_indices={n: range(8 * i, 8 * i + 8) for i, n in enumerate(names)})

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, stop.set)
        await live.run(lambda e: None, stop)

    asyncio.run(main())


def without_gpus(src: Path, dst: Path) -> None:
    """The same recording with every SamplesTick's GPU snapshot removed (and the per-arm GPU figures
    the snapshot gave): what a GPU-less host records."""
    from specmon.session import codec

    shutil.copytree(src, dst)
    types = codec.event_types()
    lines = []
    for line in (src / "events.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        e = codec.decode_event(line, types)
        if type(e).__name__ == "SamplesTick":
            e = dataclasses.replace(e, gpus=None, samples=[
                dataclasses.replace(s, gpu_mem_used_bytes=None, gpu_mem_total_bytes=None, gpu_power_w=None)
                for s in e.samples])
        lines.append(codec.encode_event(e))
    (dst / "events.jsonl").write_text("\n".join(lines) + "\n")
    for f in ("gpus.csv",):
        with suppress(FileNotFoundError):
            (dst / f).unlink()


# --------------------------------------------------------------------------------------------


def sims(stack: ExitStack, profiles, speed: float, *flags: str) -> list[str]:
    urls = []
    for prof in profiles:
        s = stack.enter_context(start_sim("--enable-metrics", "--profile", prof, "--startup-s", "0.5", *flags,
                                          speed=speed))
        urls.append(s.url)
    return urls


def run_case(case: str, args, tmp: Path) -> Result:
    stop = threading.Event()
    with ExitStack() as stack:
        stack.callback(stop.set)
        out = tmp / f"{case}-session"
        if case == "idle":
            return measure_tui(case, "bare Textual app (one Static)", [sys.executable, "-c", IDLE_APP], args,
                               wait_figures=False, quit_key="C-q", tmp=tmp)
        if case in ("1arm", "3arm", "3arm-hl", "3arm-8gpu", "3arm-8gpu-hl"):
            profiles = PROFILES_3[:1] if case == "1arm" else PROFILES_3
            gpus = "8gpu" in case
            urls = sims(stack, profiles, args.speed, *(("--tp-size", "8") if gpus else ()))
            keep_busy(urls, stop, args.busy)
            time.sleep(2.0)
            cmd = [*SPECMON, "attach", *urls, "--interval", "1", "--out", str(out)]
            what = f"attach, {len(urls)} sim(s)" + (" --tp-size 8 (sim GPUs)" if gpus else "")
            if case.endswith("-hl"):
                return measure_headless(case, what + " --headless", [*cmd, "--headless"], args, tmp)
            return measure_tui(case, what, cmd, args, first="127.0.0.1:", tmp=tmp)
        if case in ("3arm-rp", "3arm-gpu"):
            rec = tmp / "rec-3arm-gpu"
            if not (rec / "events.jsonl").exists():
                urls = sims(stack, PROFILES_3, args.speed)
                keep_busy(urls, stop, args.busy)
                time.sleep(2.0)
                t = time.monotonic()
                record_3arm_gpu(urls, args.record, rec)
                print(f"  (recorded {args.record:g} s of 3 arms with 8 GPUs each in {time.monotonic() - t:.0f} s: {rec})",
                      flush=True)
                stop.set()
                without_gpus(rec, tmp / "rec-3arm")
            folder = rec if case == "3arm-gpu" else tmp / "rec-3arm"
            what = "replay, 3 arms x 8 GPUs (24)" if case == "3arm-gpu" else "replay, 3 arms, no GPU"
            return measure_tui(case, what, [*SPECMON, "replay", str(folder), "--speed", "1"], args,
                               first="sim-fp8-mtp", tmp=tmp)
        if case in ("fleet64", "fleet64-hl"):
            n = args.workers
            model = tmp / "model"
            model.mkdir(exist_ok=True)
            base = free_base_port(n)
            sim = start_group([*SPECMON, "sim", "--workers", str(n), "--port", str(base), "--enable-metrics",
                               "--model-path", str(model), "--startup-s", "0.5", "--speed", f"{args.speed:g}"],
                              tmp / f"{case}-sim.log")
            stack.callback(stop_group, sim)
            urls = [f"http://127.0.0.1:{base + i}" for i in range(n)]
            wait_until(f"{n} simulated workers healthy",
                       lambda: all(httpx.get(urls[k] + "/health", timeout=2).status_code == 200
                                   for k in (0, n // 2, n - 1)), 120)
            if have_gateway() and not args.no_gateway:
                gw = stack.enter_context(start_gateway("--worker-urls", *urls, "--policy", "round_robin",
                                                       workers=n, timeout=180))
                keep_busy([gw.url], stop, args.busy * 3)
                target = [gw.url, "--gateway-metrics", gw.metrics_url]
                what = f"attach GATEWAY (smg), {n} workers"
            else:
                keep_busy(urls[:8], stop, args.busy)
                target = [*urls, "--no-discover"]
                what = f"attach {n} URLs"
            time.sleep(2.0)
            cmd = [*SPECMON, "attach", *target, "--interval", "1", "--out", str(out)]
            if case.endswith("-hl"):
                return measure_headless(case, what + " --headless", [*cmd, "--headless"], args, tmp)
            return measure_tui(case, what + ": fleet table", cmd, args, fleet=True, tmp=tmp)
    raise SystemExit(f"--cases: unknown case {case!r}")


def fmt_s(v: Optional[float]) -> str:
    return "—" if v is None else f"{v:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="idle,1arm,3arm,3arm-hl,3arm-8gpu,3arm-8gpu-hl,fleet64,fleet64-hl",
                    help="also: 3arm-rp, 3arm-gpu (replays of a recording with NVML fixture GPUs)")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured window per case")
    ap.add_argument("--warm", type=float, default=5.0, help="seconds after the first figures before measuring")
    ap.add_argument("--record", type=float, default=60.0, help="seconds of the 8-GPU recording (replayed)")
    ap.add_argument("--busy", type=int, default=3, help="closed-loop streams per arm")
    ap.add_argument("--speed", type=float, default=1.0, help="the simulators' --speed")
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--size", default="160x48")
    ap.add_argument("--paint-timeout", type=float, default=60.0)
    ap.add_argument("--no-gateway", action="store_true", help="the fleet as 64 URLs even when smg is installed")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (screens, sessions)")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy the TUI over each measured window (raw stacks in the kept folder; implies --keep)")
    args = ap.parse_args()
    try:
        w, h = (int(x) for x in args.size.lower().split("x"))
    except ValueError:
        print(f"--size: expected COLSxROWS (e.g. 160x48), got {args.size!r}", file=sys.stderr)
        return 2
    args.size = (w, h)
    if shutil.which("tmux") is None:
        print("tmux is not installed (apt-get install tmux)", file=sys.stderr)
        return 2
    if args.record < args.warm + args.seconds + 15:
        args.record = args.warm + args.seconds + 15  # the replay must not end inside the window
    # First paint is measured as from a user's second start on: specmon's bytecode cached
    # (pip compiles the dependencies' at install; an editable install leaves specmon's to its
    # first run).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "specmon")], check=False)
    tmp = Path(tempfile.mkdtemp(prefix="specmon-bench-ui-"))
    results = []
    try:
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            print(f"{case} ...", flush=True)
            r = run_case(case, args, tmp)
            results.append(r)
            print(f"  cpu {r.cpu * 100:.1f}%  rss {r.rss_max / 2**20:.0f} MiB  first figures {fmt_s(r.figures_s)} s",
                  flush=True)
    finally:
        if args.keep or args.profile:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"tmux {w}x{h}, {args.seconds:g} s measured after {args.warm:g} s, sims at --speed {args.speed:g}, "
          f"{args.busy} streams per arm; host {psutil.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    head = f"{'case':<11} {'what':<44} {'CPU %':>6} {'tmux %':>7} {'RSS max':>8} {'RSS last':>9} {'frame s':>8} {'figures s':>10}"
    print(head)
    print("-" * len(head))
    for r in results:
        tm = "—" if r.tmux_cpu is None else f"{r.tmux_cpu * 100:.1f}"
        print(f"{r.case:<11} {r.what:<44} {r.cpu * 100:>6.1f} {tm:>7} {r.rss_max / 2**20:>7.0f}M "
              f"{r.rss_last / 2**20:>8.0f}M {fmt_s(r.frame_s):>8} {fmt_s(r.figures_s):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

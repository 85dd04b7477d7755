"""The simulator's stream at --speed 1: chunks per request, its own CPU, and whether it keeps its
decode-step times with C streams open on one process.

Runs `specmon sim --profile P --enable-metrics --wire-log F` at speed 1 and a closed loop of C
streamed /generate requests (1,024 input ids with a unique head, 256 output tokens, ignore_eos)
from a deliberately lean client (one uvloop protocol per connection that only finds the chunk
boundaries, so the client leaves the CPU to the server). Prints per level:
  chunks/req   SSE data events per request (without [DONE]) and, beside it, the decode steps
               the request took (spec_verify_ct, + 1 for the first token's prefill): SGLang sends
               one chunk per step (--stream-interval 1)
  sim CPU      the simulator process's user+system CPU over the window, as a share of one core
  lag          client's receive time of a request's last chunk minus the server's own
               request_finished_ts (its simulated clock as a Unix time), p50 / p99 in ms; when
               the simulator cannot keep up it holds its clock back and the lag grows: drift is
               its slope over the level (ms of simulated time lost per wall second; 0 = it kept
               up; the lag itself carries what earlier levels lost)
  step         a request's mean wall time between its chunks after the first (gap) vs its mean
               simulated decode step ((request_finished_ts - response_sent_to_client_ts) / decode
               steps), p50 over requests: equal when the simulator keeps its step times
  arrival wait wire log t_in - t_arrival: how long a request's bytes waited in the server's event
               loop before the app started handling it (p50 / p99 / max, ms)

    .venv/bin/python benchmarks/sim_stream.py [--concurrency 32,150,500,1000] [--duration 20]
        [--profile nvfp4-mtp] [--stream-interval N] [--osl 256]

Beyond the server's running cap (56 on nvfp4-mtp) the rest of C queue: at C=1000 a request waits
~100 s, so a short level's figures cover the requests that finished, and the streams still
queued a minute after the level's end are counted and dropped.

Figures depend on how busy the machine is (check `uptime`); the client shares it. Measured on a
quiet 16-core host (nvfp4-mtp, 20 s levels; C=1000 15 s), this commit vs the one before:
  C     chunks/req (steps)   sim CPU     drift ms/s   gap vs step ms   arrival wait p99/max ms
  32    94.2 (94.2) / 59.7   13% / 9%    -0.04        40.1 vs 40.9     2.5/3.2
  150   98.3 (98.3) / 61.1   14% / 10%   -0.06        55.0 vs 56.1     2.8/3.8
  500   95.6 (95.6) / 60.2   13% / 10%   -0.01        56.6 vs 57.0     16.2/18.5
  1000  96.1 (96.1)          13%          0.00        57.0 vs 57.4     132.8/135.2
(nvfp4-nospec, 166 running: 256 chunks for 256 tokens, 17-18% CPU at C=150 and 500.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.simproc import start_sim  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICKS


def pct(v: list, q: float):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(q / 100 * len(v)))]


class Conn(asyncio.Protocol):
    """One keep-alive connection; a response ends at the chunked body's terminator."""

    def __init__(self, done_cb):
        self.t = None
        self.buf = bytearray()
        self.done_cb = done_cb
        self.events = []   # receive time of each body read holding a data event
        self.ready = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.t = transport
        self.ready.set_result(None)

    def data_received(self, data):
        now = time.time()
        self.buf += data
        n = data.count(b"data: ")
        if n:
            self.events.append((now, n))
        if self.buf.endswith(b"\r\n0\r\n\r\n"):
            buf, ev = bytes(self.buf), self.events
            self.buf, self.events = bytearray(), []
            self.done_cb(buf, ev, now)

    def connection_lost(self, exc):
        pass


def body_for(rng: random.Random, tail: str, osl: int, interval) -> bytes:
    head = ",".join(str(rng.randrange(1000, 31000)) for _ in range(16))
    sp = {"max_new_tokens": osl, "ignore_eos": True}
    if interval:
        sp["stream_interval"] = interval
    return ('{"input_ids":[' + head + "," + tail + '],"stream":true,"sampling_params":'
            + json.dumps(sp) + "}").encode()


async def level(port: int, C: int, duration: float, osl: int, interval, sim_pid: int) -> dict:
    loop = asyncio.get_running_loop()
    rng = random.Random(C)
    tail = ",".join(str(rng.randrange(1000, 31000)) for _ in range(1024 - 16))
    results, stuck = [], []
    t_stop = time.time() + duration

    async def stream(i: int):
        q: asyncio.Queue = asyncio.Queue()
        tr, proto = await loop.create_connection(lambda: Conn(lambda *a: q.put_nowait(a)), "127.0.0.1", port)
        await asyncio.sleep(rng.random() * 0.5)  # not all at one instant
        while time.time() < t_stop:
            body = body_for(rng, tail, osl, interval)
            tr.write(b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            try:
                buf, ev, t_end = await asyncio.wait_for(q.get(), max(5.0, t_stop + 60 - time.time()))
            except asyncio.TimeoutError:
                stuck.append(i)  # no complete answer a minute after the level's end
                break
            results.append((buf, ev, t_end))
        tr.close()

    cpu0, t0 = proc_cpu(sim_pid), time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(stream(i) for i in range(C)))
    wall = time.monotonic() - t0
    cpu = proc_cpu(sim_pid) - cpu0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    ccpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    chunks, steps, lags, gaps, sim_steps, toks, ends = [], [], [], [], [], 0, []
    for buf, ev, t_end in results:
        text = buf.decode()
        datas = [p for p in text.split("data: ")[1:]]
        if not datas:
            continue
        # the last JSON event: chunked framing may split it, so take it up to its closing brace
        last = datas[-2] if datas[-1].startswith("[DONE]") else datas[-1]
        try:
            meta = json.loads(last[:last.rindex("}") + 1])["meta_info"]
        except (ValueError, KeyError):
            continue
        n_chunks = sum(1 for d in datas if not d.startswith("[DONE]"))
        verify = meta.get("spec_verify_ct") or max(0, meta["completion_tokens"] - 1)
        chunks.append(n_chunks)
        steps.append(verify + 1)
        toks += meta["completion_tokens"]
        lags.append((t_end - meta["request_finished_ts"]) * 1000)
        ends.append(t_end)
        sim_steps.append((meta["request_finished_ts"] - meta["response_sent_to_client_ts"]) / max(1, verify) * 1000)
        times = [t for t, _ in ev]
        if len(times) > 2:  # after the first token (its prefill pass)
            gaps.append((times[-1] - times[1]) / (len(times) - 2) * 1000)
    # The clock held back (the simulator fell behind) shows as a lag that grows over the level:
    # its slope, in ms of simulated time lost per wall second.
    drift = None
    if len(ends) > 10:
        drift = statistics.linear_regression(ends, lags).slope
    if stuck:
        print(f"  C={C}: {len(stuck)} streams got no complete answer", flush=True)
    return {"C": C, "requests": len(chunks), "drift_ms_s": drift, "wall_s": wall, "sim_cpu": cpu / wall, "client_cpu": ccpu / wall,
            "tok_s": toks / wall,
            "chunks_per_req": statistics.mean(chunks) if chunks else None,
            "steps_per_req": statistics.mean(steps) if steps else None,
            "lag_p50_ms": pct(lags, 50), "lag_p99_ms": pct(lags, 99),
            "gap_p50_ms": pct(gaps, 50), "sim_step_p50_ms": pct(sim_steps, 50)}


def wire_waits(path: Path, since: float) -> dict:
    waits = []
    for line in path.read_text().splitlines():
        w = json.loads(line)
        if w.get("t_arrival") is not None and w["t_in"] >= since:
            waits.append((w["t_in"] - w["t_arrival"]) * 1000)
    return {"wait_p50_ms": pct(waits, 50), "wait_p99_ms": pct(waits, 99), "wait_max_ms": max(waits) if waits else None}


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


class _Running:
    """A simulator already started by hand (--port/--pid/--wire-log-file), e.g. under a profiler."""

    def __init__(self, port: int, pid: int):
        self.port = port
        self.proc = type("P", (), {"pid": pid})()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


async def main_async(a) -> None:
    wl = Path(a.wire_log_file) if a.wire_log_file else Path(tempfile.mkdtemp(prefix="sim-stream-")) / "wire.jsonl"
    flags = ["--profile", a.profile, "--enable-metrics", "--startup-s", "0.5", "--wire-log", str(wl)]
    if a.server_stream_interval:
        flags += ["--stream-interval", str(a.server_stream_interval)]
    with (_Running(a.port, a.pid) if a.port else start_sim(*flags, speed=1)) as sim:
        print(f"profile {a.profile}, speed 1, 1024 in / {a.osl} out, {a.duration:.0f} s per level; "
              f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
        print(f"{'C':>5} {'reqs':>5} {'tok/s':>7} {'chunks/req':>10} {'steps/req':>9} {'sim CPU':>8} "
              f"{'client CPU':>10} {'lag p50/p99 ms':>15} {'drift ms/s':>10} {'gap ms':>10} {'sim step ms':>11} "
              f"{'arrival wait p50/p99/max ms':>28}")
        for C in a.concurrency:
            since = time.time()
            r = await level(sim.port, C, a.duration, a.osl, a.stream_interval, sim.proc.pid)
            r.update(wire_waits(wl, since))
            print(f"{C:>5} {r['requests']:>5} {fmt(r['tok_s'], '.0f'):>7} {fmt(r['chunks_per_req']):>10} "
                  f"{fmt(r['steps_per_req']):>9} {r['sim_cpu'] * 100:>7.0f}% {r['client_cpu'] * 100:>9.0f}% "
                  f"{fmt(r['lag_p50_ms']):>7}/{fmt(r['lag_p99_ms']):<7} {fmt(r['drift_ms_s'], '.2f'):>10} {fmt(r['gap_p50_ms']):>10} "
                  f"{fmt(r['sim_step_p50_ms']):>11} "
                  f"{fmt(r['wait_p50_ms'])}/{fmt(r['wait_p99_ms'])}/{fmt(r['wait_max_ms']):>8}", flush=True)
            await asyncio.sleep(1.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", default="32,150,500,1000")
    ap.add_argument("--duration", type=float, default=20.0, help="wall seconds per level")
    ap.add_argument("--profile", default="nvfp4-mtp")
    ap.add_argument("--osl", type=int, default=256)
    ap.add_argument("--stream-interval", type=int, default=None, help="per request (sampling_params)")
    ap.add_argument("--server-stream-interval", type=int, default=None, help="the server's --stream-interval")
    ap.add_argument("--port", type=int, default=None,
                    help="use a simulator already running on 127.0.0.1:PORT (with --pid and --wire-log-file)")
    ap.add_argument("--pid", type=int, default=None)
    ap.add_argument("--wire-log-file", default=None)
    a = ap.parse_args()
    a.concurrency = [int(x) for x in a.concurrency.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # C connections, and the sim inherits it
    want = 8192 if hard == resource.RLIM_INFINITY else min(8192, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        import uvloop
        uvloop.run(main_async(a))
    except ImportError:
        asyncio.run(main_async(a))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

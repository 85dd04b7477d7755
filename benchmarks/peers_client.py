"""specmon's load client against AIPerf, GuideLLM and SGLang's bench_serving, on the same simulator.

Each client runs alone (one at a time) against its own fresh `specmon sim` (one simulated
nvfp4-mtp server, --speed 1, --wire-log) at each concurrency C, sending 1,024-token prompts for
256 output tokens (ignore_eos). The simulator's wire log is the ground truth: per request the wall
time its bytes reached the server (t_arrival, else t_in: when the app began handling it) and when
its first / last token bodies went to the socket, and the server's request id (rid). Against it:

  TTFT   each client's own per-request TTFT vs the wire's first body - arrival (mean and p99 ratios)
  ITL    each client's per-request ITL vs the wire's (last token body - first body) / (tokens - 1)
  tok/s  each client's own output throughput vs the wire's tokens / (last body - first arrival)
  CPU    user+system CPU of the client's whole process tree (children included: AIPerf's services,
         GuideLLM's workers) per 1,000 output tokens: over the whole run (start-up included,
         "cpu/1k") and over the load only (first arrival to last body on the wire, "load cpu/1k")

Requests are matched by the server's rid where a client keeps it (specmon records SGLang's
meta_info.id); the others drop it, and their means and p99s are compared with the wire's over the
same set of requests (every request of the run, none failed: the counts must agree), which needs no
pairing. specmon opens each level's C connections before the level's clock starts (the time they
took is in its note), so its requests go out on open sockets; the peers connect as they send. For
specmon also the added latency per chunk: client stamp - wire body stamp, for each
request's first and last token chunk (p50 / p99). Targets for specmon: within 0.5 % of the wire,
>= 10x less CPU than either peer at 1,000 streams from one process, p99 added latency per chunk
< 1 ms at C=150.

Endpoints: specmon and bench_serving send input_ids to /generate (bench_serving's
--tokenize-prompt works only there); AIPerf and GuideLLM send text to /v1/completions (neither can
send token ids). Text prompts are counted by the simulator with the same tokenizer the clients
build them with: a word-level tokenizer this script writes (every word of the peers' own prompt
corpora is one token), so every prompt is 1,024 tokens on both sides and nothing is downloaded.

The simulator admits every stream (--max-running-requests and --max-total-tokens raised to the
largest C): at the profile's own caps (56 running) most of 1,000 streams would sit in its queue,
idle, which tests the server's queue rather than the clients.

The peers are installed into their own venvs on first use, pinned (PEERS below), under
$HOME/.cache/specmon/peers/<tool>; bench_serving comes from the real-SGLang venv
($HOME/.cache/specmon/sglvenv, or SPECMON_SGLANG_VENV) when present, else from sglang installed
into peers/bench_serving without its dependencies plus the few bench_serving imports.

    .venv/bin/python benchmarks/peers_client.py [--levels 32,150,500,1000] [--tools specmon,aiperf,guidellm,bench_serving]
                                                [--repeat N]   # N runs each, the median-CPU run shown
    .venv/bin/python benchmarks/peers_client.py --setup      # only build the venvs and the tokenizer

Time-sensitive: on a shared machine the figures move with its load (printed with them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import psutil  # noqa: E402

CACHE = Path.home() / ".cache" / "specmon" / "peers"
SGLVENV = Path(os.environ.get("SPECMON_SGLANG_VENV") or Path.home() / ".cache" / "specmon" / "sglvenv")
PEERS = {"aiperf": ["aiperf==0.13.0"], "guidellm": ["guidellm==0.8.1"]}
SGLANG_PIN = "sglang==0.5.10.post1"
# What sglang.bench_serving imports beyond sglang itself (for a venv built without sglang's deps).
BENCH_SERVING_DEPS = ["aiohttp", "numpy", "requests", "tqdm", "transformers", "pillow", "pybase64", "datasets"]
# specmon-py: specmon with SPECMON_NATIVE=0 (the Python reader and pacer, as where no C compiler was)
TOOLS = ("specmon", "specmon-py", "aiperf", "guidellm", "bench_serving")
# Where any hub lookup a peer attempts goes: a closed port on loopback, so it fails at once.
NO_HUB = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1",
          "AIPERF_TELEMETRY": "0", "GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL": "WARNING"}


# ------------------------------------------------------------------------------------------
# setup


def venv_python(tool: str) -> Path:
    if tool == "bench_serving" and (SGLVENV / "bin" / "python").exists():
        return SGLVENV / "bin" / "python"
    return CACHE / tool / "bin" / "python"


def ensure_venv(tool: str) -> Path:
    py = venv_python(tool)
    probe = {"aiperf": "import aiperf", "guidellm": "import guidellm", "bench_serving": "import sglang.bench_serving"}
    if py.exists() and subprocess.run([str(py), "-c", probe[tool]], capture_output=True).returncode == 0:
        return py
    d = CACHE / tool
    print(f"building the {tool} venv in {d} (pip; a few minutes) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True)
    pip = [str(d / "bin" / "python"), "-m", "pip", "install", "-q"]
    if tool == "bench_serving":
        subprocess.run(pip + ["--no-deps", SGLANG_PIN], check=True)
        subprocess.run(pip + BENCH_SERVING_DEPS, check=True)
    else:
        subprocess.run(pip + PEERS[tool], check=True)
    return d / "bin" / "python"


_WORD = re.compile(r"\w+|[^\w\s]+")


def ensure_tokenizer() -> Path:
    """A word-level tokenizer (tokenizer.json + tokenizer_config.json) whose vocabulary holds every
    word of the peers' prompt corpora (GuideLLM's Faker lorem words, AIPerf's Shakespeare), so a
    prompt decoded to text and counted again by the simulator is the same number of tokens."""
    out = CACHE / "wordtok"
    if (out / "tokenizer.json").exists():
        return out
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    pythons = {t: ensure_venv(t) for t in ("aiperf", "guidellm")}
    words: set[str] = set()
    got = subprocess.run([str(pythons["guidellm"]), "-c",
                          "from faker.providers.lorem.en_US import Provider; print(' '.join(Provider.word_list))"],
                         capture_output=True, text=True, check=True).stdout
    words.update(_WORD.findall(got.lower()))
    got = subprocess.run([str(pythons["aiperf"]), "-c", "import aiperf, pathlib; print(pathlib.Path(aiperf.__file__).parent)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    for f in Path(got).glob("dataset/generator/assets/*.txt"):
        words.update(_WORD.findall(f.read_text(errors="replace").lower()))
    words.update(_WORD.findall("the of and to a in is it you that he was for on are with as i his they be at one "
                               "have this from or had by . , ; : ! ? ' \" - ( ) [ ] 0 1 2 3 4 5 6 7 8 9"))
    special = ["<s>", "</s>", "[UNK]"]
    vocab = {t: i for i, t in enumerate(special + sorted(words - set(special)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "[UNK]", "model_max_length": 1 << 20, "add_bos_token": False}))
    (out / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": len(vocab)}))
    print(f"word-level tokenizer: {len(vocab)} tokens in {out}")
    return out


# ------------------------------------------------------------------------------------------
# measuring a client


class TreeCpu:
    """CPU seconds (user + system) of a process and all its descendants, sampled every 0.2 s (a
    time series, for the load-only share) and closed with wait4's rusage at exit (what the polls
    missed of processes that ended between two of them)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.samples, self.seen = proc, [], {}
        self.total: Optional[float] = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _poll(self) -> float:
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                t = p.cpu_times()
                self.seen[(p.pid, p.create_time())] = t.user + t.system
            except psutil.Error:
                pass
        return sum(self.seen.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._poll()))
            self._stop.wait(0.2)

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                pid, status, ru = os.wait4(self.proc.pid, 0)
                break
            time.sleep(0.1)
        self._stop.set()
        self._t.join()
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        polled = sum(self.seen.values())
        self.total = max(polled, ru.ru_utime + ru.ru_stime)
        self.samples.append((time.time(), self.total))
        return self.proc.returncode

    def between(self, t0: float, t1: float) -> float:
        def at(t: float) -> float:
            prev = (self.samples[0][0], 0.0)
            for ts, v in self.samples:
                if ts >= t:
                    if ts == prev[0]:
                        return v
                    return prev[1] + (v - prev[1]) * (t - prev[0]) / (ts - prev[0])
                prev = (ts, v)
            return prev[1]
        return at(t1) - at(t0)


# A shell that sets PYTHONDONTWRITEBYTECODE (this repository's own sandbox did) would have every
# start compile again whatever changed since the last compileall: not what a user's run costs.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_tree(cmd: list[str], log: Path, env: Optional[dict] = None, timeout: float = 1800) -> TreeCpu:
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**_ENV, **NO_HUB, **(env or {})}, cwd=str(log.parent))
    cpu = TreeCpu(proc)
    rc = cpu.wait(timeout)
    if rc != 0:
        raise RuntimeError(f"{cmd[0]} ... exited {rc}; the end of {log}:\n" + log.read_text(errors="replace")[-3000:])
    return cpu


@dataclass
class ClientRun:
    """What one client reported, in seconds; per request where it says so."""

    ttft: list[float]                      # per request
    itl: list[float]                       # per request: its mean inter-token latency
    tok_s: Optional[float]                 # the client's own output throughput
    tokens: int
    rids: Optional[list[str]] = None       # aligned with ttft/itl when the client keeps the rid
    chunk_lag: list[float] = field(default_factory=list)  # specmon: client stamp - wire body stamp
    note: str = ""


def load_wire(path: Path) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("status") == 200 and r.get("t_first_body") and r.get("t_last_token_body")]


def arrival(w: dict) -> float:
    return w.get("t_arrival") or w["t_in"]


# ------------------------------------------------------------------------------------------
# the clients


def run_specmon(url: str, c: int, n: int, a, work: Path, wire_log: Path,
                native: bool = True) -> tuple[ClientRun, TreeCpu]:
    out = work / "specmon.json"
    # its own small script: the measured process imports what the `specmon` command does, no more
    cmd = [sys.executable, str(Path(__file__).resolve().parent / "specmon_client_child.py"), url, str(c), str(n),
           str(a.input_len), str(a.output_len), str(out)]
    cpu = run_tree(cmd, work / "specmon.log", env=None if native else {"SPECMON_NATIVE": "0"})
    got = json.loads(out.read_text())
    wire = {w["rid"]: w for w in load_wire(wire_log)}
    ttft, itl, rids, lag, send, wait, fw = [], [], [], [], [], [], []
    for r in got["requests"]:
        if r["status"] != "ok" or r["rid"] not in wire or r["tokens"] < 2:
            continue
        w = wire[r["rid"]]
        rids.append(r["rid"])
        # where its TTFT beyond the wire's goes: stamp -> request in the kernel (a fresh
        # connection's connect included), then in the kernel until the server's loop read it
        send.append(r["written"] - r["sent"])
        wait.append(arrival(w) - r["written"])
        fw.append((r["first"] - r["written"], w["t_first_body"] - r["written"]))
        ttft.append(r["first"] - r["sent"])
        itl.append((r["last"] - r["first"]) / (r["tokens"] - 1))
        lag += [r["first"] - w["t_first_body"], r["last"] - w["t_last_token_body"]]
    ok = [r for r in got["requests"] if r["status"] == "ok"]
    toks = sum(r["tokens"] for r in ok)
    span = max(r["end"] for r in ok) - min(r["sent"] for r in ok)
    ms = lambda v: f"{sorted(v)[len(v) // 2] * 1000:.1f}/{p99(v) * 1000:.1f}"  # noqa: E731
    return ClientRun(ttft, itl, toks / span, toks, rids, lag,
                     note=f"from its write: TTFT {sum(a for a, _ in fw) / sum(b for _, b in fw):.4f} of the wire; "
                          f"load thread {got['client_cpu_ms_per_1k']} ms/1k, loop lag p99 {got['lag_p99_ms']} ms; "
                          f"CPU s: {', '.join(f'{k} {v:.2f}' for k, v in got['cpu_split_s'].items())}; "
                          f"{c} connections opened before the level's clock in {got.get('connect_s')} s; "
                          f"ms p50/p99: stamp->sent {ms(send)} (a connect included where one was needed), "
                          f"sent->server read {ms(wait)}"), cpu


def run_bench_serving(url: str, c: int, n: int, a, work: Path, py: Path, tok: Path) -> tuple[ClientRun, TreeCpu]:
    out = work / "bench.jsonl"
    cmd = [str(py), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
           "--dataset-name", "random-ids", "--random-input-len", str(a.input_len),
           "--random-output-len", str(a.output_len), "--random-range-ratio", "1", "--num-prompts", str(n),
           "--max-concurrency", str(c), "--tokenizer", str(tok), "--disable-tqdm", "--output-file", str(out),
           "--output-details", "--tokenize-prompt", "--warmup-requests", "0", "--seed", "1"]
    cpu = run_tree(cmd, work / "bench.log", env={"HF_HUB_OFFLINE": "1"})
    res = json.loads(out.read_text().strip().splitlines()[-1])
    ttft, itl = [], []
    for t, gaps, nout, err in zip(res["ttfts"], res["itls"], res["output_lens"], res["errors"]):
        if err or not t or nout < 2:
            continue
        ttft.append(t)
        itl.append(sum(gaps) / (nout - 1))  # its per-token gaps add up to first -> last token
    return ClientRun(ttft, itl, res["output_throughput"], int(sum(res["output_lens"]))), cpu


def run_aiperf(url: str, c: int, n: int, a, work: Path, py: Path, tok: Path) -> tuple[ClientRun, TreeCpu]:
    art = work / "aiperf"
    cmd = [str(py.parent / "aiperf"), "profile", "--model", "sim", "--url", url, "--endpoint-type", "completions",
           "--streaming", "--tokenizer", str(tok), "--isl", str(a.input_len), "--isl-stddev", "0",
           "--osl", str(a.output_len), "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true",
           "--concurrency", str(c), "--request-count", str(n), "--ui", "none", "--no-server-metrics",
           "--use-server-token-count", "--random-seed", "1", "--artifact-dir", str(art)]
    cpu = run_tree(cmd, work / "aiperf.log")
    ttft, itl, toks, starts, ends = [], [], 0, [], []
    for line in (art / "profile_export.jsonl").read_text().splitlines():
        r = json.loads(line)
        m, meta = r.get("metrics") or {}, r.get("metadata") or {}
        if r.get("error") or "time_to_first_token" not in m:
            continue
        ttft.append(m["time_to_first_token"]["value"] / 1000)
        if "inter_token_latency" in m:
            itl.append(m["inter_token_latency"]["value"] / 1000)
        toks += int((m.get("output_token_count") or m.get("output_sequence_length") or {"value": 0})["value"])
        starts.append(meta["request_start_ns"] / 1e9)
        ends.append(meta["request_end_ns"] / 1e9)
    # its output tok/s from its own stamps: all tokens / (last end - first start)
    return ClientRun(ttft, itl, toks / (max(ends) - min(starts)), toks), cpu


def run_guidellm(url: str, c: int, n: int, a, work: Path, py: Path, tok: Path) -> tuple[ClientRun, TreeCpu]:
    out = work / "guidellm.json"
    cmd = [str(py.parent / "guidellm"), "run",
           "--backend", f"kind=openai_http,target={url},model=sim,request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={c}", "--constraint", f"kind=max_requests,count={n}",
           "--tokenizer", f"kind=hf_auto,model={tok}",
           "--data", f"kind=synthetic_text,prompt_tokens={a.input_len},output_tokens={a.output_len}",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]
    cpu = run_tree(cmd, work / "guidellm.log", env={"HF_HUB_OFFLINE": "1"})
    bench = json.loads(out.read_text())["benchmarks"][0]
    ttft, itl, rids, toks, starts, ends = [], [], [], 0, [], []
    for r in (bench.get("requests") or {}).get("successful") or []:
        if r.get("time_to_first_token_ms") is None or r.get("inter_token_latency_ms") is None:
            continue
        ttft.append(r["time_to_first_token_ms"] / 1000)
        itl.append(r["inter_token_latency_ms"] / 1000)
        rids.append(r.get("response_id"))  # the "id" of the server's chunks: SGLang's rid
        toks += int(r.get("output_tokens") or 0)
        starts.append(r["request_start_time"])
        ends.append(r["request_end_time"])
    if len(ttft) < 0.9 * n:
        raise ValueError(f"guidellm kept {len(ttft)} of {n} requests in its report")
    # (at C=500 one of 500 was missing from its successful list: matched by rid, the rest count)
    # its own per-second throughput series averages the ramp-down in: tokens / span instead
    return ClientRun(ttft, itl, toks / (max(ends) - min(starts)), toks, rids if all(rids) else None), cpu


# ------------------------------------------------------------------------------------------
# comparing


def p99(v: list[float]) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(round(0.99 * (len(v) - 1))))]


@dataclass
class Row:
    tool: str
    c: int
    n_client: int
    n_wire: int
    matched: str
    ttft_mean: float
    ttft_p99: float
    ttft_ms: float
    wire_ttft_ms: float
    itl_mean: float
    tok_s: Optional[float]
    cpu_1k: float
    load_cpu_1k: float
    wall_s: float
    lag_p50_ms: Optional[float] = None
    lag_p99_ms: Optional[float] = None
    note: str = ""


def compare(tool: str, c: int, run: ClientRun, cpu: TreeCpu, wire: list[dict], wall: float, osl: int) -> Row:
    by_rid = {w["rid"]: w for w in wire}
    if run.rids is not None and all(r in by_rid for r in run.rids):
        ws = [by_rid[r] for r in run.rids]
        matched = "rid"
    else:
        ws = wire
        matched = "set"
    w_ttft = [w["t_first_body"] - arrival(w) for w in ws]
    w_itl = [(w["t_last_token_body"] - w["t_first_body"]) / (osl - 1) for w in ws]
    w_span = max(w["t_last_body"] for w in wire) - min(arrival(w) for w in wire)
    w_tok_s = len(wire) * osl / w_span
    tokens = run.tokens or len(wire) * osl
    t0, t1 = min(arrival(w) for w in wire), max(w["t_last_body"] for w in wire)
    lag = sorted(run.chunk_lag)
    return Row(tool, c, len(run.ttft), len(wire), matched,
               statistics.fmean(run.ttft) / statistics.fmean(w_ttft),
               p99(run.ttft) / p99(w_ttft) if len(run.ttft) > 1 else float("nan"),
               statistics.fmean(run.ttft) * 1000, statistics.fmean(w_ttft) * 1000,
               statistics.fmean(run.itl) / statistics.fmean(w_itl) if run.itl else float("nan"),
               run.tok_s / w_tok_s if run.tok_s else None,
               cpu.total / tokens * 1e6, cpu.between(t0, t1) / tokens * 1e6, wall,
               lag[len(lag) // 2] * 1000 if lag else None, p99(lag) * 1000 if lag else None, run.note)


def fmt(v: Optional[float], f: str) -> str:
    return "-" if v is None or v != v else format(v, f)


def print_table(rows: list[Row]) -> None:
    print()
    print(f"{'client':<14}{'C':>6}{'n':>6}{'match':>6}{'TTFT ms/wire':>16}{'TTFT mean':>11}{'TTFT p99':>10}{'ITL mean':>10}"
          f"{'tok/s':>8}{'cpu/1k ms':>11}{'load cpu/1k':>12}{'chunk lag p50/p99 ms':>22}{'wall s':>8}")
    for r in rows:
        lag = f"{fmt(r.lag_p50_ms, '.2f')}/{fmt(r.lag_p99_ms, '.2f')}" if r.lag_p50_ms is not None else "-"
        ms = f"{r.ttft_ms:.1f}/{r.wire_ttft_ms:.1f}"
        print(f"{r.tool:<14}{r.c:>6}{r.n_client:>6}{r.matched:>6}{ms:>16}{fmt(r.ttft_mean, '.4f'):>11}{fmt(r.ttft_p99, '.4f'):>10}"
              f"{fmt(r.itl_mean, '.4f'):>10}{fmt(r.tok_s, '.4f'):>8}{fmt(r.cpu_1k, '.0f'):>11}"
              f"{fmt(r.load_cpu_1k, '.0f'):>12}{lag:>22}{r.wall_s:>8.0f}"
              + (f"  ({r.note})" if r.note else ""))
    print("ratios are client / wire (1.0000 = the server's socket); cpu/1k: ms of CPU per 1,000 output tokens, "
          "the client's whole process tree")


def medians(rows: list[Row]) -> list[Row]:
    """One row per tool and C from its runs: the run of median CPU over the whole run (its
    figures as measured, nothing averaged), the CPU range of all its runs in the note."""
    out = []
    for key in dict.fromkeys((r.tool, r.c) for r in rows):
        runs = sorted((r for r in rows if (r.tool, r.c) == key), key=lambda r: r.cpu_1k)
        mid = runs[(len(runs) - 1) // 2]
        spread = (f"{len(runs)} runs: cpu/1k {runs[0].cpu_1k:.1f}-{runs[-1].cpu_1k:.1f}, load cpu/1k "
                  f"{min(r.load_cpu_1k for r in runs):.1f}-{max(r.load_cpu_1k for r in runs):.1f}")
        out.append(dataclasses.replace(mid, note="; ".join(x for x in (spread, mid.note) if x)))
    return out


def print_targets(rows: list[Row]) -> None:
    """specmon against the targets, from the rows of this run: with its C reader, then without."""
    for tool in ("specmon", "specmon-py"):
        mine = {r.c: r for r in rows if r.tool == tool}
        if not mine:
            continue
        top = max(mine)
        r = mine[top]
        worst = max(abs(x - 1) for x in (r.itl_mean, r.tok_s or 1.0))
        print(f"{tool} targets at C={top}: ITL and tok/s within 0.5 % of the wire: worst {worst:.2%} "
              f"({'met' if worst <= 0.005 else 'not met'}); TTFT mean {r.ttft_mean:.4f} of the wire "
              "(the TTFT from its write is in its note)")
        for peer in ("aiperf", "guidellm", "bench_serving"):
            p = next((x for x in rows if x.tool == peer and x.c == top), None)
            if p is not None:
                print(f"  CPU vs {peer}: {p.cpu_1k / r.cpu_1k:.1f}x less over the run, "
                      f"{p.load_cpu_1k / r.load_cpu_1k:.1f}x over the load (target 10x)")
        if 150 in mine and mine[150].lag_p99_ms is not None:
            print(f"  added latency per chunk at C=150: p99 {mine[150].lag_p99_ms:.2f} ms (target < 1 ms)")
    c_rows = {r.c: r for r in rows if r.tool == "specmon"}
    for r in (x for x in rows if x.tool == "specmon-py" and x.c in c_rows):
        print(f"  C={r.c}: the Python reader's CPU {r.cpu_1k / c_rows[r.c].cpu_1k:.2f}x the C reader's over the run, "
              f"{r.load_cpu_1k / c_rows[r.c].load_cpu_1k:.2f}x over the load")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="32,150,500,1000")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--requests", default="auto",
                    help="requests per run (auto: max(C, 200), at least one wave and a few hundred)")
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--profile", default="nvfp4-mtp")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each tool at each C, round by round; the table shows each tool's median-CPU run")
    ap.add_argument("--setup", action="store_true", help="only build the venvs and the tokenizer")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, wire logs, exports)")
    a = ap.parse_args()
    from helpers.simproc import start_sim

    tools = [t for t in a.tools.split(",") if t]
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        print(f"--tools: unknown {', '.join(bad)}; expected some of {', '.join(TOOLS)}", file=sys.stderr)
        return 2
    levels = [int(x) for x in a.levels.split(",")]
    if a.repeat < 1:
        print(f"--repeat: expected a count of runs >= 1, got {a.repeat}", file=sys.stderr)
        return 2
    pythons = {t: ensure_venv(t) for t in tools if not t.startswith("specmon")}
    # Every client starts with its bytecode cached, as after its first run: pip compiled the peers'
    # at install; an editable install leaves specmon's to its first run.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "specmon")], check=False)
    tok = ensure_tokenizer()
    if a.setup:
        print("ready:", ", ".join(f"{t} {p}" for t, p in pythons.items()), f"tokenizer {tok}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="specmon-peers-"))
    cap = max(levels)
    rows: list[Row] = []
    print(f"sim {a.profile} --speed 1, {a.input_len} in / {a.output_len} out, running cap {cap}; "
          f"load average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; work in {work}", flush=True)
    for c in levels:
        n = max(c, 200) if a.requests == "auto" else int(a.requests)
        # round by round, every tool once a round: what the machine does meanwhile falls on all
        for rep, tool in ((r, t) for r in range(a.repeat) for t in tools):
            d = work / (f"{tool}-C{c}" + (f"-{rep + 1}" if a.repeat > 1 else ""))
            d.mkdir()
            wire_log = d / "wire.jsonl"
            load0 = os.getloadavg()[0]
            with start_sim("--enable-metrics", "--profile", a.profile, "--startup-s", "1", "--model-path", str(tok),
                           "--max-running-requests", str(cap), "--max-total-tokens",
                           str(cap * (a.input_len + a.output_len) + 4096), "--wire-log", str(wire_log),
                           speed=1.0, timeout=120, log_dir=d) as sim:
                t = time.monotonic()
                try:
                    if tool in ("specmon", "specmon-py"):
                        run, cpu = run_specmon(sim.url, c, n, a, d, wire_log, native=tool == "specmon")
                    else:
                        fn = {"aiperf": run_aiperf, "guidellm": run_guidellm, "bench_serving": run_bench_serving}[tool]
                        run, cpu = fn(sim.url, c, n, a, d, pythons[tool], tok)
                except (RuntimeError, KeyError, ValueError, OSError) as e:
                    print(f"{tool} C={c}: failed: {str(e)[-1500:]}", flush=True)
                    continue
                wall = time.monotonic() - t
            wire = load_wire(wire_log)
            row = compare(tool, c, run, cpu, wire, wall, a.output_len)
            row.note = "; ".join(x for x in (row.note, f"load {load0:.1f}->{os.getloadavg()[0]:.1f}") if x)
            rows.append(row)
            print_table([row])
    if a.repeat > 1:
        rows = medians(rows)
    print_table(rows)
    print_targets(rows)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

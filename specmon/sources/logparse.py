"""SGLang's log lines, read as a live source (launch mode).

A launched server's stderr says what its scheduler is doing even without ``--enable-metrics``:
``Decode batch`` lines (every ``--decode-log-interval`` steps) carry running/queued requests, KV
tokens and usage, acceptance length and generation throughput; ``Prefill batch`` lines carry the
queue and usage after each prefill; startup lines say which phase the server is in; a dead
server's last lines say why it died. Formats are SGLang 0.5.10's and 0.5.23's (sglang_names.LOG
lists what changed; #pending-token in 0.5.23's Prefill lines is skipped). Everything here is a pure
function of the text, except ``LogState`` which folds lines into the latest values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from specmon.model import Sample
from specmon.sources import sglang_names as names

READY_TEXT = "The server is fired up and ready to roll!"

# `[2025-11-30 09:15:43]`, `[2025-11-30 09:15:43.123]` (SGLANG_LOG_MS=1), `[... TP0]`, `[... DP1 TP3]`.
_HEAD = r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)(?P<pfx>[^\]]*)\] "
_NUM = r"[\d.]+"

# Decode: the fixed start, then each field searched on its own so that optional parts (the
# iteration counter, the speculative pair, PD and MFU parts, hybrid pools) never shift the others.
_DECODE = re.compile(_HEAD + r"Decode batch(?: \[\d+\])?, #running-req: (?P<run>\d+), (?P<rest>.*)")
_ACCEPT = re.compile(r"accept len: (" + _NUM + r"), accept rate: (" + _NUM + r")")
_DECODE_TAIL = re.compile(
    r"(?:cuda|cpu|npu) graph: (?P<graph>True|False), gen throughput \(token/s\): (?P<tps>" + _NUM + r"), "
    r"#queue-req: (?P<queue>\d+)"
)
_PREFILL = re.compile(
    _HEAD + r"Prefill batch(?: \[\d+\])?, #new-seq: (?P<seqs>\d+), #new-token: (?P<new>\d+), "
    r"#cached-token: (?P<cached>\d+), (?P<pool>.*?)#running-req: (?P<run>\d+), #queue-req: (?P<queue>\d+),"
    r"(?:.*?input throughput \(token/s\): (?P<tps>" + _NUM + r"))?"
)
# Pool parts: plain `#token: N, token usage: U`; hybrid `#full token: N, full token usage: U, ...`.
_POOL_TOKENS = re.compile(r"#(?:full )?token: (\d+)")
_POOL_FULL_USAGE = re.compile(r"full token usage: (" + _NUM + r")")
_POOL_USAGE = re.compile(r"(?<![a-z] )token usage: (" + _NUM + r")")
# 0.5.10: `KV Cache is allocated. #tokens: N, ...`; 0.5.23: `KV Cache is allocated. dtype: D, #tokens: N, ...`
_KV_ALLOCATED = re.compile(r"KV Cache is allocated\.(?: dtype: [^,]*,)? #tokens: (\d+)(?P<rest>.*)")
_MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+)(?:.*?max_running_requests=(\d+))?")


@dataclass
class DecodeStats:
    ts_text: str
    prefix: str  # e.g. "TP0", "" on one GPU
    running: int
    tokens: Optional[int]  # #token (KV tokens in use); None on lines without it
    token_usage: Optional[float]
    accept_length: Optional[float]  # None when speculation is off (the pair is absent)
    accept_rate: Optional[float]
    graph: bool
    gen_tok_s: float
    queued: int


@dataclass
class PrefillStats:
    ts_text: str
    prefix: str
    new_seqs: int
    new_tokens: int
    cached_tokens: int
    token_usage: Optional[float]
    running: int  # the batch before these sequences join
    queued: int
    input_tok_s: Optional[float]


def _pool(text: str) -> tuple[Optional[int], Optional[float]]:
    tokens = _POOL_TOKENS.search(text)
    usage = _POOL_FULL_USAGE.search(text) or _POOL_USAGE.search(text)
    return (int(tokens.group(1)) if tokens else None, float(usage.group(1)) if usage else None)


def parse_decode(line: str) -> Optional[DecodeStats]:
    m = _DECODE.match(line)
    if not m:
        return None
    rest = m.group("rest")
    tail = _DECODE_TAIL.search(rest)
    if not tail:
        return None
    tokens, usage = _pool(rest[: tail.start()])
    acc = _ACCEPT.search(rest)
    return DecodeStats(
        ts_text=m.group("ts"), prefix=m.group("pfx").strip(), running=int(m.group("run")),
        tokens=tokens, token_usage=usage,
        accept_length=float(acc.group(1)) if acc else None,
        accept_rate=float(acc.group(2)) if acc else None,
        graph=tail.group("graph") == "True", gen_tok_s=float(tail.group("tps")), queued=int(tail.group("queue")),
    )


def parse_prefill(line: str) -> Optional[PrefillStats]:
    m = _PREFILL.match(line)
    if not m:
        return None
    _, usage = _pool(m.group("pool"))
    tps = m.group("tps")
    return PrefillStats(
        ts_text=m.group("ts"), prefix=m.group("pfx").strip(), new_seqs=int(m.group("seqs")),
        new_tokens=int(m.group("new")), cached_tokens=int(m.group("cached")), token_usage=usage,
        running=int(m.group("run")), queued=int(m.group("queue")),
        input_tok_s=float(tps) if tps is not None else None,
    )


def is_ready(line: str) -> bool:
    return READY_TEXT in line


# --------------------------------------------------------------------------------------------
# Startup phases, in the order SGLang prints them.

PHASE_STARTING = "starting"
PHASE_LOADING = "loading weights"
PHASE_LOADED = "weights loaded"
PHASE_KV_POOL = "kv pool allocated"
PHASE_GRAPHS = "capturing cuda graphs"
PHASE_DRAFT_GRAPHS = "capturing draft cuda graphs"
PHASE_GRAPHS_DONE = "cuda graphs captured"
PHASE_HTTP_UP = "http up, warming up"
PHASE_READY = "ready"
PHASE_FAILED = "failed"
PHASE_EXITED = "exited"
PHASE_RESTARTING = "restarting"
PHASE_STOPPED = "stopped"

_PHASES: list[tuple[re.Pattern, str]] = [
    (re.compile(r"Load weight begin\.(?P<d>.*)"), PHASE_LOADING),
    (re.compile(r"Load weight end\.(?P<d>.*)"), PHASE_LOADED),
    (re.compile(r"KV Cache is allocated\.(?P<d>.*)"), PHASE_KV_POOL),
    (re.compile(r"Capture draft(?: extend)? cuda graph begin\.(?P<d>.*)"), PHASE_DRAFT_GRAPHS),
    (re.compile(r"Capture (?:cuda|cpu|npu) graph begin\.(?P<d>.*)"), PHASE_GRAPHS),
    (re.compile(r"Capture (?:cuda|cpu|npu) graph end\.(?P<d>.*)"), PHASE_GRAPHS_DONE),
    (re.compile(r"Uvicorn running on (?P<d>\S+)"), PHASE_HTTP_UP),
    (re.compile(re.escape(READY_TEXT) + r"(?P<d>)"), PHASE_READY),
]


# 0.5.23 (sglang_names.LOG["startup_timings"]): `Engine startup timings (s): load_weight=0.04,
# kv_cache_allocation=0.66, scheduler_e2e=2.32, cuda_graph={prefill=0.00, decode=0.00, ...},
# tokenizer_e2e=43.79`; a braced group is summed into its phase. 0.5.10 prints no such line; its
# start-up seconds are the `elapsed` of single phases (startup_elapsed below).
_STARTUP_TIMINGS = re.compile(re.escape(names.LOG["startup_timings"].in_release("0.5.23")) + r"\s*(?P<body>.*)$")
_TIMING_PART = re.compile(r"(\w+)=(?:\{(?P<group>[^}]*)\}|(?P<num>[\d.]+))")
_LOAD_WEIGHT_END = re.compile(re.escape(names.LOG["load_weight_end"].in_release("0.5.10")) + r"(?P<s>[\d.]+) s")
# 0.5.10's per-phase lines, named as 0.5.23's timings line names the phase where it has one. Every
# graph capture (target, piecewise, draft, draft extend: model_runner.py and the eagle workers print
# `Capture <kind> graph end. Time elapsed: S s`) adds to cuda_graph, as 0.5.23 sums its graph
# phases; the CPU test server captures none, so those lines are known from SGLang's source only.
_ELAPSED: tuple[tuple[re.Pattern, str], ...] = (
    (_LOAD_WEIGHT_END, "load_weight"),
    (re.compile("(?:" + "|".join(map(re.escape, names.LOG["init_dist_end"].aliases)) + r") elapsed=(?P<s>[\d.]+) s"),
     "init_distributed"),
    (re.compile(r"Capture (?:draft (?:extend )?)?(?:piecewise )?(?:cuda|CUDA|cpu|npu) graph end\. "
                r"Time elapsed: (?P<s>[\d.]+) s"), "cuda_graph"),
)
# A rank's tag in the line's head (`[... TP1]`, `[... DP0 TP3]`): tensor-parallel ranks print the same
# phases at the same time; only the first rank's count.
_OTHER_RANK = re.compile(r"\b(?:TP|PP|EP|DP|CP)[1-9]\d*\b")


def startup_timings(line: str) -> Optional[dict[str, float]]:
    """Start-up seconds by phase from the one line that reports them (0.5.23), or
    {"load_weight": s} from a `Load weight end. elapsed=` line; None for any other line."""
    m = _STARTUP_TIMINGS.search(line)
    if m is None:
        w = _LOAD_WEIGHT_END.search(line)
        return {"load_weight": float(w.group("s"))} if w else None
    out: dict[str, float] = {}
    for part in _TIMING_PART.finditer(m.group("body")):
        if part.group("num") is not None:
            out[part.group(1)] = float(part.group("num"))
        else:
            nums = re.findall(r"=([\d.]+)", part.group("group"))
            out[part.group(1)] = sum(float(x) for x in nums)
    return out or None


def startup_elapsed(line: str) -> Optional[tuple[str, float]]:
    """(phase, seconds) of one start-up phase's own `elapsed` line (0.5.10's only start-up
    figures), None for any other line and for a line of a rank other than the first."""
    head = re.match(_HEAD, line)
    if head is not None and _OTHER_RANK.search(head.group("pfx")):
        return None
    for pattern, phase in _ELAPSED:
        m = pattern.search(line)
        if m:
            return phase, float(m.group("s"))
    return None


def parse_phase(line: str) -> Optional[tuple[str, Optional[str]]]:
    """(phase, detail) when the line marks a startup phase, else None."""
    for pattern, phase in _PHASES:
        m = pattern.search(line)
        if m:
            detail = m.group("d").strip(" .") or None
            return phase, detail
    return None


def kv_pool_tokens(line: str) -> Optional[int]:
    """The KV pool size from `KV Cache is allocated. #tokens: N` or `max_total_num_tokens=N`."""
    m = _KV_ALLOCATED.search(line) or _MAX_TOTAL.search(line)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------------------------
# Why a server died: the first known cause found in its last lines.

# uvicorn's bind failure. SGLang 0.5.10 binds its HTTP port only after loading the model; the line
# does not end the process: the launcher hangs in "Waiting for application shutdown" (deaf to
# SIGTERM) while its warm-up thread polls /model_info on the port (120 tries, 5 s timeout each)
# and finally SIGKILLs its own process tree ("exited with code -9"), up to 12 minutes later.
_BIND_ERROR = re.compile(
    r"error while attempting to bind on address \('?(?P<host>[^',]*)'?, (?P<port>\d+)\)(?:\s*:\s*\[Errno \d+\])?"
    r":\s*address already in use", re.I)


def bind_error(line: str) -> Optional[tuple[str, int]]:
    """(host, port) when the line is the HTTP server failing to bind its port (see _BIND_ERROR)."""
    m = _BIND_ERROR.search(line)
    return (m.group("host"), int(m.group("port"))) if m else None


_BIND_CAUSE = "port {1} already in use (SGLang could not bind {0}:{1}; another process holds it)"


def bind_error_cause(host: str, port: int) -> str:
    return _BIND_CAUSE.format(host, port)


_CAUSES: list[tuple[re.Pattern, str]] = [
    (_BIND_ERROR, _BIND_CAUSE),
    (re.compile(r"address already in use|Port is already in use|is used by a process already", re.I),
     "port in use"),
    (re.compile(r"Spec v2 currently only supports topk = 1"),
     "speculative_eagle_topk must be unset (or 1) with SGLANG_ENABLE_SPEC_V2=1"),
    (re.compile(r"--mamba-scheduler-strategy extra_buffer"),
     "hybrid (Mamba/GDN) model with speculation needs --mamba-scheduler-strategy extra_buffer "
     "and SGLANG_ENABLE_SPEC_V2=1"),
    (re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"), "CUDA out of memory"),
    # Real SGLang 0.5.10 with --mem-fraction-static 1.5 on the CPU engine: no argparse error, the
    # scheduler asks for a pool larger than the machine and the OS OOM killer ends it.
    (re.compile(r"scheduler died during initialization \(exit code: -9\)"),
     "scheduler killed (SIGKILL) during start-up: likely the OS OOM killer; "
     "check --mem-fraction-static / --max-total-tokens"),
    (re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"),
     "not enough GPU memory left for the KV pool (raise --mem-fraction-static or use a smaller model)"),
    (re.compile(r"Unknown quantization method: (\S+?)\."), "unsupported quantization: {0}"),
    (re.compile(r"quantization.*is not supported for the current GPU|is not supported for the current GPU"),
     "quantization not supported on this GPU"),
    (re.compile(r"does not match the quantization method"),
     "--quantization does not match the checkpoint's quantization"),
    (re.compile(r"is not a local folder and is not a valid model identifier|Repo id must be|"
                r"HFValidationError|does not appear to have a file named config\.json|"
                r"Can't load the configuration of|No such file or directory: .*config\.json"),
     "model path not found (not a local folder with config.json, nor a reachable Hugging Face id)"),
    (re.compile(r"error: (argument --\S+: .*)"), "bad flag: {0}"),
    (re.compile(r"error: (unrecognized arguments: .*)"), "bad flag: {0}"),
    (re.compile(r"error: (the following arguments are required: .*)"), "bad flag: {0}"),
]
_ERROR_LINE = re.compile(r"(?:^|\s)(?:error|ERROR|Error): (.+)$")
_EXCEPTION = re.compile(r"^(?:\[[^\]]*\] )?(?P<exc>[A-Za-z_.]*(?:Error|Exception)): (?P<msg>.+)$")
_ASSERTION = re.compile(r"^(?:\[[^\]]*\] )?AssertionError(?::\s*(?P<msg>.*))?$")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_CARETS = re.compile(r"^[\s^~]+$")
# SGLang 0.5.10 server_args.py `_handle_speculative_decoding`: with --speculative-num-steps unset it
# asserts that --speculative-eagle-topk and --speculative-num-draft-tokens are unset too, bare
# (no message); Python 3.11 prints the sub-expression that failed, e.g.
# `and self.speculative_num_draft_tokens is None`.
# SGLang 0.5.23 moved the check to arg_groups/speculative_hook.py `_handle_eagle_family`, whose
# object is `cfg`.
_SPEC_STEPS_ASSERT = re.compile(r"(?:self|cfg)\.speculative_(?:eagle_topk|num_draft_tokens) is None")


def assertion_cause(lines: list[str]) -> Optional[str]:
    """A dead server's last AssertionError, named from the frame that raised it: SGLang asserts on
    its arguments, often with no message. 'SGLang rejected the speculative-decoding arguments: ...'
    when the frame is SGLang's speculative-decoding argument handling."""
    for end in range(len(lines) - 1, -1, -1):
        m = _ASSERTION.match(lines[end].strip())
        if m:
            break
    else:
        return None
    msg = (m.group("msg") or "").strip()
    frame, source = None, []
    for i in range(end - 1, max(-1, end - 12), -1):
        f = _FRAME.match(lines[i])
        if f:
            frame = f
            source = [x.strip() for x in lines[i + 1:end] if x.strip() and not _CARETS.match(x)]
            break
    where = f"{frame.group('file').rsplit('/', 1)[-1]} line {frame.group('line')}" if frame else None
    what = msg or (source[-1] if source and source[-1] not in ("assert (", "assert") else "")
    spec_frame = frame is not None and (
        "speculative" in frame.group("func").lower() or "speculative" in frame.group("file").rsplit("/", 1)[-1])
    if spec_frame:
        text = f"SGLang rejected the speculative-decoding arguments: {what or 'assert failed'} ({where})"
        if not msg and _SPEC_STEPS_ASSERT.search(what):
            text += ("; --speculative-eagle-topk / --speculative-num-draft-tokens need "
                     "--speculative-num-steps (give all three, or none for SGLang's defaults)")
        return text[:300]
    if what or where:
        return f"AssertionError: {what or 'assert failed'}" + (f" ({where}, in {frame.group('func')})" if frame else "")
    return None


def failure_cause(lines: Iterable[str]) -> Optional[str]:
    """A recognised cause in a dead server's last lines, else the last exception line, else None."""
    lines = [line.rstrip("\n") for line in lines]
    for pattern, cause in _CAUSES:
        for line in reversed(lines):
            m = pattern.search(line)
            if m:
                return cause.format(*m.groups()) if m.groups() else cause
    for i in range(len(lines) - 1, -1, -1):  # the last exception, an assert named from its frame
        if _ASSERTION.match(lines[i].strip()):
            cause = assertion_cause(lines[: i + 1])
            if cause is not None:
                return cause
        m = _EXCEPTION.match(lines[i].strip())
        if m:
            return f"{m.group('exc')}: {m.group('msg')}"[:300]
    for line in reversed(lines):
        m = _ERROR_LINE.search(line)
        if m:
            return m.group(1).strip()[:300]
    return None


# --------------------------------------------------------------------------------------------
# Folding lines into the latest values


class LogState:
    """The latest scheduler figures seen in one server's log, as a Sample (source="log").

    Decode lines are the complete report; a prefill line refreshes queue, usage and running
    (running after the prefill = before + new sequences). Unknown stays None.
    """

    def __init__(self) -> None:
        self.running: Optional[int] = None
        self.queued: Optional[int] = None
        self.kv_used_tokens: Optional[int] = None
        self.kv_capacity_tokens: Optional[int] = None
        self.kv_usage: Optional[float] = None
        self.gen_tok_s: Optional[float] = None
        self.accept_length: Optional[float] = None
        self.accept_rate: Optional[float] = None
        self.spec_seen = False  # an accept len appeared at least once
        self.max_running_requests: Optional[int] = None
        self._timings: Optional[dict[str, float]] = None  # 0.5.23's timings line
        self._elapsed: dict[str, float] = {}  # 0.5.10's per-phase elapsed lines (graph captures summed)
        self.lines_parsed = 0

    @property
    def startup_s(self) -> Optional[dict[str, float]]:
        """Start-up seconds by phase: 0.5.23's timings line when it printed one (it covers every
        phase), else what 0.5.10's elapsed lines gave; None before any."""
        if self._timings:
            return dict(self._timings)
        return dict(self._elapsed) or None

    def feed(self, line: str) -> bool:
        """Take one line; True when it changed the figures."""
        d = parse_decode(line)
        if d is not None:
            self.running, self.queued, self.gen_tok_s = d.running, d.queued, d.gen_tok_s
            if d.tokens is not None:
                self.kv_used_tokens = d.tokens
            if d.token_usage is not None:
                self.kv_usage = d.token_usage
            if d.accept_length is not None:
                self.spec_seen = True
            self.accept_length, self.accept_rate = d.accept_length, d.accept_rate
            self.lines_parsed += 1
            return True
        p = parse_prefill(line)
        if p is not None:
            self.running, self.queued = p.running + p.new_seqs, p.queued
            if p.token_usage is not None:
                self.kv_usage = p.token_usage
            self.lines_parsed += 1
            return True
        if "elapsed" in line or "Engine startup timings" in line:
            t = startup_timings(line) if "Engine startup timings" in line else None
            if t is not None:
                self._timings = t
                return False
            e = startup_elapsed(line)
            if e is not None:
                phase, seconds = e
                self._elapsed[phase] = self._elapsed.get(phase, 0.0) + seconds if phase == "cuda_graph" else seconds
            return False
        if "KV Cache is allocated" in line or "max_total_num_tokens=" in line:
            size = kv_pool_tokens(line)
            if size is not None:
                self.kv_capacity_tokens = size
            m = _MAX_TOTAL.search(line)
            if m and m.group(2):
                self.max_running_requests = int(m.group(2))
            return size is not None
        return False

    def sample(self, arm: str, ts: float) -> Sample:
        usage = self.kv_usage
        used = self.kv_used_tokens
        # A usage of 0.00 with a known pool is an exact enough zero; derive tokens only when missing.
        if used is None and usage is not None and self.kv_capacity_tokens:
            used = round(usage * self.kv_capacity_tokens)
        return Sample(
            ts=ts, arm=arm, up=True, state="up", source="log",
            running_reqs=self.running, queued_reqs=self.queued,
            kv_used_tokens=used, kv_capacity_tokens=self.kv_capacity_tokens, kv_usage=usage,
            gen_tok_s=self.gen_tok_s, accept_length=self.accept_length, accept_rate=self.accept_rate,
            spec_enabled=True if self.spec_seen else None,
        )

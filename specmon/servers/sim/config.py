"""Command line of `specmon sim`: SGLang's launch flags that matter, harmless ones accepted and
ignored, plus the simulator's own (--profile, --speed, faults)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import Optional

from specmon.errors import UsageError
from specmon.servers.sim.profiles import DEFAULT_PROFILE, DRAFTERS, PROFILES, Profile

IGNORED_VALUE_FLAGS = ["--device", "--load-format", "--attention-backend", "--quantization", "--log-level",
                       "--log-level-http", "--chunked-prefill-size", "--tokenizer-path", "--dtype", "--context-length",
                       "--random-seed", "--page-size", "--schedule-policy",
                       "--cuda-graph-max-bs", "--speculative-draft-model-revision", "--watchdog-timeout",
                       "--mamba-scheduler-strategy", "--reasoning-parser", "--tool-call-parser", "--admin-api-key",
                       "--uvicorn-access-log-exclude-prefixes", "--max-prefill-tokens"]
IGNORED_BOOL_FLAGS = ["--trust-remote-code", "--skip-server-warmup", "--disable-cuda-graph",
                      "--enable-mixed-chunk", "--disable-overlap-schedule",
                      "--enable-torch-compile"]
SPEC_ALGOS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH"]
KV_DTYPES = ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):  # no abbreviations: a typo is refused, never guessed
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line, exit 2 through UsageError
        raise UsageError(f"{message}")


def _speed(text: str) -> float:
    """--speed: a finite number > 0 (nan and inf were a traceback), at most a million."""
    from specmon.bounds import check_positive

    try:
        return check_positive(float(text), most=1e6)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e) if "expected" in str(e) else f"expected a number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="specmon sim", description="A simulated SGLang server on 127.0.0.1 (0.5.23's shapes, "
                                                "or 0.5.10.post1's with --sglang-version 0.5.10).")
    p.add_argument("--model-path", "--model", default=None,
                   help="the model it stands for, as /server_info and /v1/models report it (default the profile's); "
                        "a local folder holding a tokenizer.json counts text prompts with it")
    p.add_argument("--served-model-name", default=None,
                   help="the model name in API answers (default --model-path)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=30000,
                   help="port to listen on (default 30000); with --workers N the first of N")
    p.add_argument("--tp-size", "--tensor-parallel-size", "--tp", type=int, default=1,
                   help="tensor-parallel size, as reported in /server_info (default 1)")
    p.add_argument("--mem-fraction-static", type=float, default=None,
                   help="share of GPU memory for weights and the KV pool (default the profile's, SGLang's rule)")
    p.add_argument("--max-total-tokens", type=int, default=None,
                   help="KV pool size in tokens (default: what the memory left after the weights holds)")
    p.add_argument("--max-running-requests", type=int, default=None,
                   help="most requests running at once; the rest queue (default the profile's)")
    p.add_argument("--kv-cache-dtype", choices=KV_DTYPES, default=None,
                   help="KV cache element type: sets the bytes per token of the pool (default the model's)")
    p.add_argument("--speculative-algorithm", default=None,
                   help=f"speculative decoding: {', '.join(SPEC_ALGOS)} (default the profile's drafter)")
    p.add_argument("--speculative-num-steps", type=int, default=None,
                   help="draft steps per verify (default the drafter's)")
    p.add_argument("--speculative-eagle-topk", type=int, default=None,
                   help="draft branches per step (default the drafter's)")
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None,
                   help="draft tokens verified per step (default the drafter's)")
    p.add_argument("--speculative-draft-model-path", default=None,
                   help="the draft model reported in /server_info (default the drafter's)")
    p.add_argument("--enable-metrics", action="store_true",
                   help="serve /metrics and the per-request figures SGLang adds with it")
    p.add_argument("--api-key", default=None,
                   help="require this bearer key on every endpoint but /health and /metrics")
    p.add_argument("--decode-log-interval", type=int, default=40,
                   help="decode steps between two 'Decode batch' log lines (default 40)")
    p.add_argument("--stream-interval", type=int, default=1,
                   help="as SGLang's flag: a streamed request gets a chunk when its output length L has "
                        "L %% N == 1 after a decode step (every step for N=1, the default; a request's "
                        "sampling_params.stream_interval overrides it), and always its first token and finish")
    p.add_argument("--disable-radix-cache", action="store_true", help="no prefix cache (as SGLang's flag)")
    p.add_argument("--dp-size", "--data-parallel-size", "--dp", type=int, default=1,
                   help="data-parallel ranks: schedulers with a KV pool each, their series labelled dp_rank")
    p.add_argument("--enable-metrics-for-all-schedulers", action="store_true",
                   help="accepted as SGLang's flag (every DP rank exports its series with or without it)")
    p.add_argument("--disaggregation-mode", choices=["null", "prefill", "decode"], default="null",
                   help="PD disaggregation role; a prefill server also serves the bootstrap server")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998,
                   help="the prefill's bootstrap server port (SGLang's default 8998)")
    p.add_argument("--disaggregation-transfer-backend", default="mooncake",
                   help="KV transfer backend of a PD pair, as reported (default mooncake)")
    p.add_argument("--enable-cache-report", action="store_true",
                   help="OpenAI usage carries prompt_tokens_details.cached_tokens (as SGLang's flag)")
    for f in IGNORED_VALUE_FLAGS:
        p.add_argument(f, default=None, dest="ignored_" + f.strip("-").replace("-", "_"), metavar="VALUE",
                       help="tokens per prefill chunk (default the profile's)" if f == "--chunked-prefill-size"
                       else "SGLang's flag: accepted, no effect on the simulator")
    for f in IGNORED_BOOL_FLAGS:
        p.add_argument(f, action="store_true", dest="ignored_" + f.strip("-").replace("-", "_"),
                       help="SGLang's flag: accepted, no effect on the simulator")
    # simulator's own
    p.add_argument("--profile", default=None, help=f"named profile (default {DEFAULT_PROFILE}); see --list-profiles")
    p.add_argument("--list-profiles", action="store_true",
                   help="print the named profiles (GPU, model, drafter) and exit")
    p.add_argument("--speed", type=_speed, default=1.0,
                   help="simulated seconds per wall second (default 1). Streams get a chunk per decode step (as "
                        "SGLang, see --stream-interval) below speed 2; at speed S>=2 a chunk holds up to floor(S) "
                        "steps, so a stream gets no more chunks per wall second than at speed 1 (first tokens and "
                        "finishes are never held back; the wire log says coalesce_steps)")
    p.add_argument("--drafter", default=None, help="override the profile's drafter: " + ", ".join(DRAFTERS))
    p.add_argument("--gpu-flops-scale", type=float, default=1.0, metavar="F",
                   help="scale the profile GPU's achieved FLOP/s by F (0 < F <= 1; default 1): a slower card, "
                        "whose decode turns compute-bound at a small batch, before the KV pool or the request cap "
                        "binds (prefill slows by as much)")
    p.add_argument("--request-log", default=None, help="append 'METHOD PATH' per HTTP request to this file")
    p.add_argument("--wire-log", default=None,
                   help="append one JSON line per generate request, wall-clock (time.time()) stamps: t_arrival "
                        "when the server's event loop read the request's first bytes from its socket, t_in when "
                        "the app began handling it (t_in - t_arrival: its wait in the event loop), t_first_body / "
                        "t_last_token_body / t_last_body when the first body chunk, the last one with tokens and "
                        "the [DONE] went to the socket; bodies counts the body writes, coalesce_steps how many "
                        "decode steps a chunk may hold at this --speed (benchmarks/ramp_fidelity.py)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of acceptance draws, output lengths and request ids (worker i: SEED+i; default 0)")
    p.add_argument("--workers", type=int, default=1,
                   help="serve N simulated servers from this one process, on ports PORT..PORT+N-1 (seeds SEED+i)")
    p.add_argument("--startup-s", type=float, default=None,
                   help="simulated startup time before /health turns 200 (default from the profile)")
    p.add_argument("--fault-crash-after", type=int, default=None,
                   help="fault: exit after N finished requests")
    p.add_argument("--fault-stall-after", type=int, default=None,
                   help="fault: the scheduler stalls after N finished requests (for --fault-stall-s)")
    p.add_argument("--fault-stall-s", type=float, default=5.0,
                   help="fault: how long the stall lasts, wall seconds (default 5)")
    p.add_argument("--fault-metrics", choices=["slow", "malformed", "absent"], default=None,
                   help="fault: /metrics answers after 5 s, with a broken body, or 404")
    p.add_argument("--fault-refuse", action="store_true",
                   help="fault: never listen (every connection is refused)")
    p.add_argument("--fault-503-above", type=int, default=None,
                   help="fault: answer 503 to a generation request while N or more are in flight")
    p.add_argument("--sglang-version", default="0.5.23", metavar="VERSION",
                   help="the SGLang release whose metric names, /server_info, /v1/loads, meta_info and log "
                        "lines it speaks: 0.5.23 (default) or 0.5.10 (0.5.10.post1)")
    p.add_argument("--export-metrics-to-file", action="store_true",
                   help="one JSON line per finished request in --export-metrics-to-file-dir, as SGLang 0.5.23")
    p.add_argument("--export-metrics-to-file-dir", default=None, help="the folder of those files")
    return p


# The releases the simulator speaks, by every spelling accepted, to the short name the code keys on.
SGLANG_VERSIONS = {"0.5.23": "0.5.23", "0.5.10": "0.5.10", "0.5.10.post1": "0.5.10"}
# What /server_info, /v1/loads and the logs report as the version.
SGLANG_VERSION_STRINGS = {"0.5.23": "0.5.23", "0.5.10": "0.5.10.post1"}


@dataclass
class SimConfig:
    args: argparse.Namespace
    profile: Profile
    model_path: str
    served_model_name: str


def resolve(args: argparse.Namespace) -> SimConfig:
    v = SGLANG_VERSIONS.get(args.sglang_version)
    if v is None:
        raise UsageError(f"--sglang-version {args.sglang_version!r}: expected 0.5.23 or 0.5.10 (0.5.10.post1)")
    args.sglang_version = v
    name = args.profile or DEFAULT_PROFILE
    if name not in PROFILES:
        raise UsageError(f"unknown profile {name!r}; known profiles: {', '.join(PROFILES)}")
    prof = PROFILES[name]
    if args.speed <= 0:
        raise UsageError(f"--speed must be positive, got {args.speed}")
    if args.stream_interval < 1:
        raise UsageError(f"--stream-interval must be at least 1, got {args.stream_interval}")
    if not 1 <= args.dp_size <= 64:
        raise UsageError(f"--dp-size must be 1 to 64, got {args.dp_size}")
    if not 1 <= args.workers <= 512:
        raise UsageError(f"--workers must be 1 to 512, got {args.workers}")
    if not 1 <= args.port <= 65535 - (args.workers - 1):
        raise UsageError(f"--port {args.port} with --workers {args.workers}: ports past 65535")
    if args.disaggregation_mode == "prefill" and args.workers > 1:
        raise UsageError("--disaggregation-mode prefill serves one bootstrap port: use --workers 1")
    if not 1 <= args.disaggregation_bootstrap_port <= 65535:
        raise UsageError(f"--disaggregation-bootstrap-port must be 1 to 65535, got {args.disaggregation_bootstrap_port}")
    if args.export_metrics_to_file and args.export_metrics_to_file_dir is None:  # SGLang's own words
        raise UsageError("--export-metrics-to-file-dir is required when --export-metrics-to-file is enabled")
    if args.drafter:
        if args.drafter not in DRAFTERS:
            raise UsageError(f"unknown drafter {args.drafter!r}; known: {', '.join(DRAFTERS)}")
        prof = prof.with_overrides(drafter=DRAFTERS[args.drafter])
    algo = args.speculative_algorithm
    if algo is not None:
        algo_u = algo.upper()
        if algo_u not in SPEC_ALGOS:
            raise UsageError(f"--speculative-algorithm {algo!r}: expected one of {', '.join(SPEC_ALGOS)}")
        if not prof.drafter.algorithm:
            # Speculation asked for on a no-spec profile: MTP-like heads, as SGLang would run them.
            prof = prof.with_overrides(drafter=DRAFTERS["mtp"])
        d = prof.drafter
        if algo_u == "NEXTN":
            algo_u = "EAGLE"
        steps = args.speculative_num_steps or d.num_steps
        topk = args.speculative_eagle_topk or d.eagle_topk
        ndt = args.speculative_num_draft_tokens or (steps + 1 if topk == 1 and d.name == "mtp" else d.num_draft_tokens)
        prof = prof.with_overrides(drafter=replace(
            d, algorithm=algo_u, num_steps=steps, eagle_topk=topk, num_draft_tokens=ndt,
            draft_passes=steps if d.draft_positions == 1 else d.draft_passes,
            draft_model_path=args.speculative_draft_model_path or d.draft_model_path))
    if not 0 < args.gpu_flops_scale <= 1:
        raise UsageError(f"--gpu-flops-scale must be above 0 and at most 1, got {args.gpu_flops_scale}")
    if args.gpu_flops_scale != 1.0:
        prof = prof.with_overrides(gpu=replace(prof.gpu, flop_efficiency=prof.gpu.flop_efficiency * args.gpu_flops_scale))
    prof = prof.with_overrides(mem_fraction_static=args.mem_fraction_static,
                               max_total_tokens=args.max_total_tokens,
                               max_running_requests=args.max_running_requests,
                               kv_cache_dtype=args.kv_cache_dtype)
    if args.ignored_chunked_prefill_size:
        try:
            prof = prof.with_overrides(chunked_prefill_size=int(args.ignored_chunked_prefill_size))
        except ValueError:
            raise UsageError(f"--chunked-prefill-size expects an integer, got {args.ignored_chunked_prefill_size!r}")
    model_path = args.model_path or prof.model.model_path
    return SimConfig(args=args, profile=prof, model_path=model_path,
                     served_model_name=args.served_model_name or model_path)


def parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    args.launch_argv = _masked(list(argv))  # 0.5.23's /server_info launch_command
    return args


def _masked(argv: list[str]) -> list[str]:
    """The command line with the API key's value hidden (specmon never writes a key anywhere)."""
    out = []
    hide = False
    for a in argv:
        if hide:
            out.append("<hidden>")
            hide = False
        elif a == "--api-key":
            out.append(a)
            hide = True
        elif a.startswith("--api-key="):
            out.append("--api-key=<hidden>")
        else:
            out.append(a)
    return out


def optional_int(v) -> Optional[int]:
    return None if v is None else int(v)


def coalesce_steps(speed: float) -> int:
    """How many decode steps one stream chunk may hold at this --speed: 1 below 2 (a chunk per
    step, as SGLang), floor(speed) above, so a stream's chunks per wall second stay what they
    are at speed 1 (engine.Scheduler._deliver)."""
    return max(1, int(speed))

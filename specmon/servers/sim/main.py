"""`specmon sim` process: SGLang's startup sequence (log lines, warm-up, readiness) around the
scheduler and the HTTP app, plus the fault switches."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import socket
import sys
import time

from specmon.errors import ServerError, UsageError

log = logging.getLogger("sglang.sim")


def _setup_logging() -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    root.addHandler(h)
    root.setLevel(logging.INFO)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _bind(host: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as e:
        s.close()
        raise ServerError(f"port {port} on {host} is already in use ({e.strerror})")
    s.listen(2048)
    s.setblocking(False)
    return s


def profile_table() -> str:
    """`specmon sim --list-profiles`: the catalog with the pool size and running cap each gets."""
    from specmon.servers.sim.physics import Physics
    from specmon.servers.sim.profiles import DRAFTERS, GB, GPUS, PROFILES

    lines = [f"{'profile':<14} {'gpu':<13} {'weights':>8} {'drafter':<7} {'accept':>6} {'kv pool':>8} {'cap':>4}  description"]
    for p in PROFILES.values():
        ph = Physics(p)
        gpu = [k for k, g in GPUS.items() if g is p.gpu][0]
        acc = p.drafter.accept_length.get(p.weight_format)
        lines.append(
            f"{p.name:<14} {gpu:<13} {p.model.weight_bytes[p.weight_format] / GB:>6.1f}GB {p.drafter.name:<7} "
            f"{(f'{acc:.2f}' if acc else '-'):>6} {ph.max_total_tokens:>8} {ph.max_running_requests:>4}  {p.description}")
    lines.append("")
    lines.append("GPUs: " + ", ".join(f"{k} ({g.memory_bytes / GB:.0f} GB, {g.bandwidth_bps / 1e12:.2f} TB/s, "
                                       f"FP8 {g.flops['fp8'] / 1e12:.0f} TFLOP/s)" for k, g in GPUS.items()))
    lines.append("Drafters: " + ", ".join(d.name for d in DRAFTERS.values()))
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    from specmon.servers.sim import config

    try:
        args = config.parse(argv)
        if args.list_profiles:
            print(profile_table())
            return 0
        cfg = config.resolve(args)
        socks = [] if args.fault_refuse else [_bind(args.host, args.port + i) for i in range(args.workers)]
        # A PD prefill serves its bootstrap server too (the decode asks it for the prefill's layout).
        boot = _bind(args.host, args.disaggregation_bootstrap_port) \
            if args.disaggregation_mode == "prefill" and not args.fault_refuse else None
    except UsageError as e:
        print(f"specmon: error: {e}", file=sys.stderr)
        return 2
    except ServerError as e:
        print(f"specmon sim: error: {e}", file=sys.stderr)
        return 3
    _setup_logging()
    prom_dir = None
    if args.enable_metrics and args.workers == 1:  # several servers: an own registry each (metrics.py)
        from specmon.servers.sim.metrics import setup_multiprocess_dir

        prom_dir = setup_multiprocess_dir()
    try:
        return _run(_serve(cfg, socks, boot))
    except KeyboardInterrupt:
        return 0
    finally:
        if prom_dir:
            from specmon.servers.sim.metrics import cleanup_multiprocess_dir

            cleanup_multiprocess_dir(prom_dir)


async def _sleep_sim(clock, sim_s: float) -> None:
    await asyncio.sleep(max(0.0, sim_s / clock.speed))


def _run(main) -> int:
    """SGLang's HTTP server runs on uvloop (http_server.py sets the uvloop policy and starts
    uvicorn with loop="uvloop"); so does the simulator where uvloop is installed. Its cheaper I/O
    matters at C=150 on two cores: a new request waits behind every stream's chunk of the pass."""
    try:
        import uvloop
    except ImportError:  # not on this platform (Windows): the standard loop serves the same API
        return asyncio.run(main)
    return uvloop.run(main)


def _build_worker(cfg, index: int, clock, log_lines: bool):
    """One simulated server: its DP ranks' schedulers (each with its own KV pool, physics and
    metrics children), its ServerArgs and its SimState. Worker i of --workers N has port PORT+i
    and seed SEED+i."""
    from specmon.servers.sim.app import SimState
    from specmon.servers.sim.config import coalesce_steps
    from specmon.servers.sim.dp import DPScheduler
    from specmon.servers.sim.engine import Hooks, Scheduler
    from specmon.servers.sim.physics import Physics
    from specmon.servers.sim.server_args import build_server_args

    args, prof = cfg.args, cfg.profile
    seed = args.seed + index
    engine_type = {"prefill": "prefill", "decode": "decode"}.get(args.disaggregation_mode, "unified")
    families = None
    if args.enable_metrics:
        from prometheus_client import CollectorRegistry

        from specmon.servers.sim.metrics import Families

        families = Families(CollectorRegistry(auto_describe=True) if args.workers > 1 else None)
    ranks, metrics = [], None
    for k in range(args.dp_size):
        rank_seed = seed if k == 0 else seed + 7919 * k
        ph = Physics(prof, seed=rank_seed)
        hooks = Hooks()
        if families is not None:
            from specmon.servers.sim.metrics import SimMetrics

            hooks = SimMetrics(cfg.served_model_name, ph.max_total_tokens, families=families,
                               dp_rank=k if args.dp_size > 1 else None, engine_type=engine_type,
                               sglang_version=args.sglang_version)
            metrics = metrics or hooks  # rank 0's object serves /metrics and counts HTTP and CPU
        ranks.append(Scheduler(ph, clock, max_running_requests=ph.max_running_requests,
                               chunked_prefill_size=prof.chunked_prefill_size,
                               max_prefill_tokens=prof.max_prefill_tokens,
                               decode_log_interval=args.decode_log_interval, hooks=hooks, seed=rank_seed,
                               stream_interval=args.stream_interval, coalesce_steps=coalesce_steps(args.speed),
                               radix_cache=not args.disable_radix_cache, log_lines=log_lines and k == 0,
                               sglang_version=args.sglang_version))
    sched = ranks[0] if len(ranks) == 1 else DPScheduler(ranks)
    server_args = build_server_args(cfg, ranks[0].ph)
    server_args["port"] = args.port + index
    server_args["stream_interval"] = args.stream_interval
    st = SimState(cfg=cfg, physics=ranks[0].ph, scheduler=sched, clock=clock, metrics=metrics,
                  server_args=server_args, logger=log)
    st.rank_metrics = [s.hooks for s in ranks]
    return st


def _kv_dtype_name(prof) -> str:
    """The torch dtype 0.5.23's "KV Cache is allocated" line names for the profile's KV dtype."""
    d = (prof.kv_cache_dtype or "auto").lower()
    if d.startswith("fp8"):
        return "torch.float8_e4m3fn" if "e4m3" in d else "torch.float8_e5m2"
    if d.startswith("fp4"):
        return "torch.float4_e2m1fn_x2"
    return "torch.bfloat16"


async def _serve(cfg, socks, boot=None) -> int:
    import uvicorn

    from specmon.servers.sim.app import arrival_stamping_protocol, build_app, wrap_middlewares
    from specmon.servers.sim.clock import SimClock
    from specmon.servers.sim.engine import SimRequest
    from specmon.servers.sim.stablehash import stable_hash

    args, prof = cfg.args, cfg.profile
    clock = SimClock(args.speed)
    workers = [_build_worker(cfg, i, clock, log_lines=(i == 0)) for i in range(args.workers)]
    ph, server_args = workers[0].ph, workers[0].server_args

    # -- SGLang's startup lines, durations in simulated time ---------------------------------------
    gpu_gb = prof.gpu.memory_bytes / 1e9
    new = args.sglang_version != "0.5.10"
    # The key itself stays out of the log (SGLang prints it; specmon's logs must not carry secrets).
    shown = {k: ('<hidden>' if k == 'api_key' and v else v) for k, v in server_args.items()}
    # Both releases warn about their old entry point (the recordings have the line).
    log.warning("UserWarning: 'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
                "recommended entrypoint.")
    if new:  # 0.5.23 prints a dict
        log.info(f"server_args={shown!r}")
    else:
        sa_repr = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        log.info(f"server_args=ServerArgs({sa_repr})")
    t_launch = clock.now()
    total_startup = args.startup_s if args.startup_s is not None else ph.model_load_s() + ph.graph_capture_s()
    scale = total_startup / (ph.model_load_s() + ph.graph_capture_s())
    init_s = 1.2 * scale * 0.1
    log.info("Init parallel begin." if new else "Init torch distributed begin.")
    await _sleep_sim(clock, init_s)
    log.info(f"Init parallel ends. elapsed={init_s:.2f} s" if new
             else f"Init torch distributed ends. elapsed={init_s:.2f} s, mem usage=0.09 GB")
    avail = gpu_gb - 0.6
    log.info(f"Load weight begin. avail mem={avail:.2f} GB")
    load_s = ph.model_load_s() * scale
    await _sleep_sim(clock, load_s)
    wgb = (ph.weight_bytes + ph.draft_weight_bytes) / 1e9
    avail -= wgb
    log.info(f"Load weight end. elapsed={load_s:.2f} s, type={prof.model.architecture}, avail mem={avail:.2f} GB, "
             f"mem usage={wgb:.2f} GB.")
    half = ph.kv_cache_gb / 2
    dtype = f"dtype: {_kv_dtype_name(prof)}, " if new else ""
    log.info(f"KV Cache is allocated. {dtype}#tokens: {ph.max_total_tokens}, K size: {half:.2f} GB, V size: {half:.2f} GB")
    avail -= ph.kv_cache_gb
    log.info(f"Memory pool end. avail mem={avail:.2f} GB")
    log.info(f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB")
    cap_s = ph.graph_capture_s() * scale
    await _sleep_sim(clock, cap_s * (0.4 if prof.drafter.algorithm else 1.0))
    avail -= ph.graph_gb
    log.info(f"Capture cuda graph end. Time elapsed: {cap_s * (0.4 if prof.drafter.algorithm else 1.0):.2f} s. "
             f"mem usage={ph.graph_gb:.2f} GB. avail mem={avail:.2f} GB.")
    if prof.drafter.algorithm:
        log.info(f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB")
        await _sleep_sim(clock, cap_s * 0.5)
        log.info(f"Capture draft cuda graph end. Time elapsed: {cap_s * 0.5:.2f} s. mem usage=0.30 GB. "
                 f"avail mem={avail - 0.3:.2f} GB.")
        log.info(f"Capture draft extend cuda graph begin. This can take up to several minutes. avail mem={avail - 0.3:.2f} GB")
        await _sleep_sim(clock, cap_s * 0.1)
        log.info(f"Capture draft extend cuda graph end. Time elapsed: {cap_s * 0.1:.2f} s. mem usage=0.10 GB. "
                 f"avail mem={avail - 0.4:.2f} GB.")
    log.info(f"max_total_num_tokens={ph.max_total_tokens}, chunked_prefill_size={prof.chunked_prefill_size}, "
             f"max_prefill_tokens={prof.max_prefill_tokens}, max_running_requests={ph.max_running_requests}, "
             f"context_len={prof.model.context_len}, available_gpu_mem={avail:.2f} GB")
    # 0.5.23's startup timings (its log line, /server_info startup_time and the startup gauges),
    # from the simulated phases above.
    spec_on = bool(prof.drafter.algorithm)
    graph_s = {"prefill": 0.0, "decode": cap_s * (0.4 if spec_on else 1.0), "target_verify": 0.0,
               "draft_prefill": 0.0, "draft_decode": cap_s * 0.5 if spec_on else 0.0,
               "draft_extend": cap_s * 0.1 if spec_on else 0.0}
    graph_gb = {"prefill": 0.0, "decode": ph.graph_gb, "target_verify": 0.0, "draft_prefill": 0.0,
                "draft_decode": 0.3 if spec_on else 0.0, "draft_extend": 0.1 if spec_on else 0.0}
    sched_e2e = clock.now() - t_launch
    # KV allocation: the pool's bytes written once at the GPU's bandwidth, plus a fixed setup cost.
    kv_alloc_s = ph.kv_cache_gb * 1e9 / prof.gpu.bandwidth_bps + 0.05
    startup = {"load_weight": load_s, "kv_cache_allocation": kv_alloc_s, "scheduler_e2e": sched_e2e,
               "cuda_graph": graph_s, "tokenizer_e2e": sched_e2e + 0.5 * scale}
    if new:
        cg = ", ".join(f"{k}={v:.2f}" for k, v in graph_s.items())
        log.info(f"Engine startup timings (s): load_weight={load_s:.2f}, "
                 f"kv_cache_allocation={startup['kv_cache_allocation']:.2f}, scheduler_e2e={sched_e2e:.2f}, "
                 f"cuda_graph={{{cg}}}, tokenizer_e2e={startup['tokenizer_e2e']:.2f}")
    for st in workers:
        st.startup_time = startup
        st.startup_available_gb = gpu_gb - 0.6
        st.graph_gb_by_phase = graph_gb
        for m in st.rank_metrics:
            if hasattr(m, "set_startup"):
                m.set_startup(phases={k: v for k, v in startup.items() if k != "cuda_graph"},
                              graph_phases=graph_s, graph_gb=graph_gb, weight_gb=wgb, kv_gb=ph.kv_cache_gb,
                              avail_gb=gpu_gb - 0.6, context_len=prof.model.context_len,
                              spec_steps=prof.drafter.num_steps if spec_on else 0,
                              spec_draft_tokens=prof.drafter.num_draft_tokens if spec_on else 0)

    if args.fault_refuse:
        # Never listen: every connection is refused.
        log.info("Fault injection: --fault-refuse, not listening.")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0

    servers, tasks = [], []
    for st, sock in zip(workers, socks):
        st.sched.start()
        app = wrap_middlewares(build_app(st), st)
        server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning", access_log=False,
                                               timeout_graceful_shutdown=1, lifespan="off",
                                               http=arrival_stamping_protocol()))
        servers.append(server)
        tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
    if boot is not None:
        from specmon.servers.sim.bootstrap import bootstrap_app

        bserver = uvicorn.Server(uvicorn.Config(bootstrap_app(workers[0]), log_config=None, log_level="warning",
                                                access_log=False, timeout_graceful_shutdown=1, lifespan="off"))
        servers.append(bserver)
        tasks.append(asyncio.create_task(bserver.serve(sockets=[boot])))
    while not all(s.started for s in servers):
        if any(t.done() for t in tasks):
            return 3
        await asyncio.sleep(0.01)
    for st in workers:
        log.info(f"INFO:     Uvicorn running on http://{args.host}:{st.server_args['port']} (Press CTRL+C to quit)")
    if boot is not None:
        log.info(f"Bootstrap server started on {args.host}:{args.disaggregation_bootstrap_port}")
    if len(servers) > 1:
        _stop_together(servers)

    # Warm-up: one /generate of 8 tokens each, as SGLang's launcher sends, counted in the metrics.
    for i, (st, server) in enumerate(zip(workers, servers)):
        _install_faults(st, server)
        if args.export_metrics_to_file:  # before the warm-up: SGLang writes its line too
            from specmon.servers.sim import export_metrics

            export_metrics.install(st, args.export_metrics_to_file_dir)
        if st.metrics is not None:
            asyncio.create_task(_cpu_sampler(st.metrics))
        seed = args.seed + i
        warm_rid = "warmup-" + format(stable_hash(seed, "warmup") % (1 << 48), "012x")
        for s in st.ranks:  # SGLang warms every DP rank up
            warm = SimRequest(rid=warm_rid, prompt_len=7, max_new_tokens=8, target_len=8, stop_by_eos=False,
                              t_created=clock.now(), stream=False, seed=stable_hash(seed, "request", warm_rid))
            s.submit(warm)
            while not warm.finished and not any(t.done() for t in tasks):
                await asyncio.sleep(0.005)
        st.ready = True
        log.info("The server is fired up and ready to roll!")
    await asyncio.gather(*tasks, return_exceptions=True)
    for st in workers:
        await st.sched.stop()
    return 0


def _stop_together(servers) -> None:
    """Several uvicorn servers in one loop: a signal that stops one (each installs its handler,
    the last one wins) stops them all."""
    loop = asyncio.get_running_loop()

    def stop_all(*_):
        for s in servers:
            s.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop_all)
        except (NotImplementedError, RuntimeError):
            pass


def _install_faults(st, server) -> None:
    args, sched = st.cfg.args, st.sched
    counts = {"n": 0}
    loop = asyncio.get_running_loop()

    def on_finished(r):
        if r.rid.startswith("warmup-"):
            return
        counts["n"] += 1
        if args.fault_crash_after is not None and counts["n"] >= args.fault_crash_after:
            log.error(f"Fault injection: crashing after {counts['n']} finished requests.")
            sched._flush()
            loop.call_later(0.05, os._exit, 1)
        if args.fault_stall_after is not None and counts["n"] == args.fault_stall_after:
            log.warning(f"Fault injection: scheduler stalls for {args.fault_stall_s} s.")
            sched.stalled_until_wall = time.monotonic() + args.fault_stall_s

    sched.on_finished_callbacks.append(on_finished)


async def _cpu_sampler(metrics) -> None:
    last = 0.0
    while True:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        cpu = ru.ru_utime + ru.ru_stime
        d = cpu - last
        last = cpu
        if d > 0:
            metrics.sample_cpu(d * 0.7, d * 0.3)
        await asyncio.sleep(5.0)

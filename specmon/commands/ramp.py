"""`specmon ramp URL... --levels 10,20,40 [...] [--headless]`: drive a closed-loop concurrency
ramp against servers that are already running (this sends generation traffic: only when asked,
and to a server that is not on this machine only with --yes). `--rates 1,2,4 [--arrival
poisson|constant|gamma] [--burstiness K] [--max-concurrency N]`: open-loop rate levels instead;
`--slo-ttft S [--slo-tpot S] --search [--attainment 0.9] [--max-level N]`: an SLO search (one
server). `--shared-prefix-len L --prefix-groups G [--zipf S]`, `--turns T [--think-time S]`:
the workload's shape (specmon/plan.py, load/workload.py).

A URL that is a gateway (smg) is ramped as one arm (the load goes to the gateway, which routes
it) while every worker it lists is watched, as `attach` watches them (`--gateway-metrics URL`;
`--no-discover`: the URL is one server); levels.csv then holds, per level, the gateway's row and
one row per worker (session/fleet_ramp.py). The --yes rule is about the URLs given: the gateway.

Builds a LiveSession (scraping, recording) with a RampDriver and runs it headless or in the TUI.
Exit 2 for bad usage, a bad dataset file, or a URL that answers as neither SGLang nor a gateway
(all before any request is sent); 3 when no server answered at all, or when not one request of
the ramp succeeded (a server that answers every request with an error was not measured).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from specmon.bounds import MAX_RATE
from specmon.errors import UsageError
from specmon.model import RampPlan
from specmon.plan import build_plan
from specmon.wiring import (
    arms_from_args, SessionOutcome, gateway_fleets, gateway_key_var, load_workload, ramp_driver,
    require_loopback_or_yes,
    run_front_end, start_metrics,
)

if TYPE_CHECKING:
    from specmon.load import Trace


def _values(args) -> dict:
    values = {"levels": list(args.levels) if args.levels is not None else None, "dataset": args.dataset,
              "category": args.category, "tokenizer": args.tokenizer, "flush_cache": bool(args.flush_cache),
              "slo_ttft_s": args.slo_ttft, "slo_tpot_s": args.slo_tpot, "search": bool(args.search)}
    given = {"input_len": args.input_len, "output_len": args.output_len, "seed": args.seed,
             "level_duration_s": args.level_duration, "requests_per_level": args.requests_per_level,
             "settle_s": args.settle, "shared_prefix_len": args.shared_prefix_len,
             "prefix_groups": args.prefix_groups, "zipf": args.zipf, "turns": args.turns,
             "think_time_s": args.think_time, "rates": args.rates, "arrival": args.arrival,
             "burstiness": args.burstiness, "max_concurrency": args.max_concurrency,
             "attainment": args.attainment, "max_level": args.max_level}
    values.update({k: v for k, v in given.items() if v is not None})  # the rest: the plan's defaults
    return values


def plan_from_args(args) -> RampPlan:
    """The plan the flags ask for, validated (UsageError naming the flag)."""
    return plan_and_trace(args)[0]


def plan_and_trace(args) -> tuple[RampPlan, Optional["Trace"]]:
    """The plan, and with --trace the trace read now (a bad file is exit 2 before anything is
    sent, its bad lines warned about on stderr); the plan's one rate is then the trace's mean
    arrival rate (levels.csv offered_rate)."""
    values = _values(args)
    spec = getattr(args, "trace", None)
    speed = getattr(args, "trace_speed", None)
    if spec is None:
        if speed is not None:
            raise UsageError("--trace-speed: only with --trace")
        return build_plan(values), None
    if args.rates is not None:
        raise UsageError("--rates: not with --trace (the trace sets when each request arrives)")
    values.update(trace=spec, trace_speed=speed if speed is not None else 1.0, rates=[1.0])
    plan = build_plan(values)  # every flag checked before the file is read

    from specmon.load import trace_from_plan, warn_skipped

    trace = trace_from_plan(plan)
    warn_skipped(trace, lambda line: print(line, file=sys.stderr))
    plan.rates = [min(max(round(trace.mean_rate, 6), 1e-6), MAX_RATE)]
    return plan, trace


def _refuse_what_is_not_sglang(arms) -> None:
    """--no-discover: every URL is one server; still, one that answers as neither SGLang nor a
    gateway (any other web server) is exit 2 before any load, as without it (GETs only)."""
    import asyncio
    import os

    from specmon.session.folder import public_url
    from specmon.sources.gateway import probe

    async def probe_all():
        return await asyncio.gather(*(probe(a.url, api_key=os.environ.get(a.api_key_env) if a.api_key_env else None)
                                      for a in arms))

    for arm, p in zip(arms, asyncio.run(probe_all())):
        if p.kind == "neither":
            raise UsageError(f"{public_url(arm.url)}: neither an SGLang server nor a gateway ({p.reason})")


def run(args) -> int:
    arms = arms_from_args(list(args.urls), list(args.name), args.api_key_env)
    plan, trace = plan_and_trace(args)
    require_loopback_or_yes(arms, args.yes)
    workload = load_workload(plan)  # a bad dataset is exit 2 before anything is sent
    # A gateway is loaded as one arm; its workers are the servers watched (GETs only). A URL that
    # answers as neither SGLang nor a gateway (any other web server) is exit 2 before any load:
    # its 404s are not a server to measure. One that does not answer yet stays (retried).
    if getattr(args, "no_discover", False):
        _refuse_what_is_not_sglang(arms)  # no gateway is looked for, but no load goes to a web page
    watched, fleets = gateway_fleets(arms, discover=not getattr(args, "no_discover", False),
                                     metrics_url=getattr(args, "gateway_metrics", None), strict=True,
                                     key_env=gateway_key_var(getattr(args, "gateway_key_env", None)))

    from specmon.session.live import LiveSession

    consumers = start_metrics(args.metrics_port, args.metrics_host)  # --metrics-port: listening now
    ramp = ramp_driver(arms, plan, workload, trace=trace)
    live = LiveSession(watched, interval=args.interval, out_dir=Path(args.out) if args.out else None,
                       isl=plan.input_len, osl=plan.output_len, ramp=ramp, mode="ramp", consumers=consumers,
                       fleets=fleets)
    outcome = SessionOutcome.of(live)  # the exit code comes from the session's end events
    run_front_end(live, headless=args.headless, ramp=ramp, title="specmon ramp " + " ".join(a.url for a in arms))
    code = outcome.exit_code()  # 130/143 when a signal ended it; exit 1 when recording failed
    outcome.require_an_answer(watched)
    return code

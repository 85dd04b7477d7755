"""`specmon ramp URL... --levels 10,20,40 [...] [--headless]`: drive a closed-loop concurrency
ramp against servers that are already running (this sends generation traffic: only when asked).

Builds a LiveSession (scraping, recording) with a RampDriver and runs it headless or in the TUI.
Exit 2 for bad usage or a bad dataset file (before any request is sent); 3 when no server
answered at all.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specmon.commands.frontend import require_an_answer, run_front_end
from specmon.errors import UsageError
from specmon.model import RampPlan


def plan_from_args(args) -> RampPlan:
    plan = RampPlan(levels=list(args.levels))
    if args.input_len is not None:
        plan.input_len = args.input_len
    if args.output_len is not None:
        plan.output_len = args.output_len
    for name in ("input_len", "output_len"):
        if getattr(plan, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')}: expected a positive token count, got {getattr(plan, name)}")
    if args.seed is not None:
        plan.seed = args.seed
    if args.requests_per_level is not None:
        if args.requests_per_level <= 0:
            raise UsageError(f"--requests-per-level: expected a positive count, got {args.requests_per_level}")
        plan.requests_per_level = args.requests_per_level
        plan.level_duration_s = None
    elif args.level_duration is not None:
        plan.level_duration_s = args.level_duration
    if args.settle is not None:
        if args.settle < 0:
            raise UsageError(f"--settle: expected seconds >= 0, got {args.settle}")
        plan.settle_s = args.settle
    plan.dataset, plan.category, plan.tokenizer = args.dataset, args.category, args.tokenizer
    plan.flush_cache = bool(args.flush_cache)
    plan.slo_ttft_s = getattr(args, "slo_ttft", None)
    plan.slo_tpot_s = getattr(args, "slo_tpot", None)
    return plan


def run(args) -> int:
    from specmon.commands.attach import arms_from_args
    from specmon.load.ramp import RampDriver
    from specmon.load.workload import Workload

    arms = arms_from_args(list(args.urls), list(args.name), args.api_key_env)
    plan = plan_from_args(args)
    # Read the workload first: a bad dataset is exit 2 before anything is sent.
    workload = Workload(input_len=plan.input_len, seed=plan.seed, tokenizer=plan.tokenizer,
                        dataset=plan.dataset, category=plan.category)
    for warning in workload.skipped:
        print(f"specmon: warning: skipped {warning}", file=sys.stderr)
    if workload.skipped:
        print(f"specmon: warning: {len(workload.skipped)} bad line(s) skipped in {plan.dataset}", file=sys.stderr)

    from specmon.session.live import LiveSession
    from specmon.session.recorder import default_out_dir

    ramp = RampDriver(arms, plan, workload=workload)
    out_dir = Path(args.out) if args.out else default_out_dir()
    live = LiveSession(arms, interval=args.interval, out_dir=out_dir, isl=plan.input_len, osl=plan.output_len,
                       ramp=ramp, mode="ramp")
    run_front_end(live, headless=args.headless, ramp=ramp, title="specmon ramp " + " ".join(a.url for a in arms))
    require_an_answer(live, arms)
    return 0

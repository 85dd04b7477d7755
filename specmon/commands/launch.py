"""`specmon launch LAYOUT.yaml [--out DIR] [--headless]`: start the layout's servers, ramp them if
the layout has a ramp, watch, record; stop every launched server at the end.

The layout and the workload are checked before anything starts (exit 2, one line). Exit 3 when no
launched server came up (with each one's cause and log tail). Warnings about flag combinations
SGLang rejects at startup are printed first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from specmon.commands.frontend import run_front_end
from specmon.errors import ServerError


def run(args) -> int:
    from specmon.servers.layout import load_layout

    layout, warnings = load_layout(args.layout)
    for w in warnings:
        print(f"specmon: warning: {w}", file=sys.stderr)
    return run_layout(layout, out=args.out, headless=args.headless, interval=getattr(args, "interval", None),
                      title=f"specmon launch {layout.name}")


def run_layout(layout, *, out: Optional[str], headless: bool, interval: Optional[float], title: str) -> int:
    from specmon.servers.launch import Supervisor
    from specmon.session.recorder import default_out_dir

    plan = layout.plan()
    workload = None
    if plan is not None:
        # Read the workload first: a bad dataset is exit 2 before any server starts.
        from specmon.load.workload import Workload

        workload = Workload(input_len=plan.input_len, seed=plan.seed, tokenizer=plan.tokenizer,
                            dataset=plan.dataset, category=plan.category)
        if workload.skipped:
            print(f"specmon: warning: {len(workload.skipped)} bad line(s) skipped in {plan.dataset}", file=sys.stderr)

    out_dir = Path(out) if out else default_out_dir()
    supervisor = Supervisor(layout, out_dir)
    try:
        return _run(layout, supervisor, plan, workload, out_dir, headless, interval, title)
    finally:
        supervisor.stop()  # every launched process group, whatever happened above


def _run(layout, supervisor, plan, workload, out_dir, headless, interval, title) -> int:
    from specmon.session.live import LiveSession

    arms = supervisor.arms
    ramp = None
    if plan is not None:
        from specmon.load.ramp import RampDriver

        ramp = RampDriver(arms, plan, workload=workload)
    live = LiveSession(
        arms, interval=interval or layout.interval_s, out_dir=out_dir,
        isl=plan.input_len if plan else 1024, osl=plan.output_len if plan else 256,
        ramp=ramp, supervisor=supervisor, gpu_indices=supervisor.gpu_indices(), mode="launch",
    )
    if live.recorder is not None:
        live.recorder.update_session(layout=layout.model_dump(mode="json", exclude={"source"}),
                                     layout_file=layout.source, logs_dir=str(supervisor.log_dir))
    reason = run_front_end(live, headless=headless, ramp=ramp, title=title)
    failed = supervisor.failed()
    for name, cause in failed.items():
        print(f"specmon: arm {name!r} failed: {cause} (log: {supervisor.log_dir / (name + '.log')})", file=sys.stderr)
    if supervisor.launched and len(failed) == len(supervisor.launched) and not layout.attached_specs():
        raise ServerError("every launched server failed: " + "; ".join(f"{n}: {c}" for n, c in failed.items()))
    if isinstance(reason, str) and reason.startswith("error"):
        print(f"specmon: {reason}", file=sys.stderr)
        return 1
    return 0

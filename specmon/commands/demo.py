"""`specmon demo`: layouts/demo.yaml (two simulated RTX PRO 6000 servers, FP8 vs NVFP4 with MTP),
launched, ramped and watched, with the command line's overrides:
--levels, --speed (the simulator's), --level-duration (simulated seconds), --out, --layout,
--slo-ttft / --slo-tpot (seconds; the SLO and goodput knees in session.json).
`specmon demo --fleet`: layouts/fleet.yaml instead (SGLang's model gateway, smg, in front of four
simulated workers, one with two DP ranks; the ramp goes through the gateway).
`specmon demo --prefix`: layouts/prefix-cache.yaml instead (the same shared-prefix load on a
simulated server with its radix cache and one without: the hit rate and the TTFT it buys)."""

from __future__ import annotations

import sys

from specmon.errors import UsageError
from specmon.plan import replace_plan
from specmon.wiring import run_layout


def run(args) -> int:
    from specmon.servers.layout import is_sim_command, load_layout

    fleet = getattr(args, "fleet", False)
    prefix = getattr(args, "prefix", False)
    if fleet and args.layout:
        raise UsageError("--fleet and --layout: --fleet is the layout fleet (layouts/fleet.yaml); give one of them")
    if prefix and (args.layout or fleet):
        raise UsageError(f"--prefix and {'--layout' if args.layout else '--fleet'}: --prefix is the layout "
                         "prefix-cache (layouts/prefix-cache.yaml); give one of them")
    if fleet:
        _require_smg()
    layout, warnings = load_layout(args.layout or ("fleet" if fleet else "prefix-cache" if prefix else "demo"))
    for w in warnings:
        print(f"specmon: warning: {w}", file=sys.stderr)
    apply_overrides(layout, levels=args.levels, speed=args.speed, level_duration=args.level_duration,
                    slo_ttft=args.slo_ttft, slo_tpot=args.slo_tpot,
                    is_sim=lambda arm: is_sim_command(layout.server_command(arm)))
    return run_layout(layout, out=args.out, headless=args.headless, interval=None,
                      intro=demo_intro(layout, headless=args.headless),
                      title="specmon demo --fleet" if fleet else "specmon demo --prefix" if prefix else "specmon demo",
                      metrics_port=args.metrics_port, metrics_host=args.metrics_host)


def demo_intro(layout, *, headless: bool) -> str:
    """The demo's first line: how long it runs (wall time: the levels at the simulators' speed,
    plus their start) and how to leave, so nobody has to guess whether it will ever end."""
    plan = layout.ramp
    leave = "Ctrl-C stops it" if headless else "q quits (Ctrl-C asks first while the ramp runs)"
    if plan is None or plan.level_duration_s is None or plan.requests_per_level:
        return f"specmon demo: runs until its ramp ends; {leave}"
    speeds = [float(a.launch.flags.get("speed", 1.0) or 1.0) for a in layout.launched]
    speed = min(speeds) if speeds else 1.0  # the slowest simulator sets the ramp's pace
    n = len(plan.steps)
    wall = n * plan.level_duration_s / speed
    minutes, seconds = divmod(int(round(wall)), 60)
    length = f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"
    return (f"specmon demo: {n} levels of {plan.level_duration_s:g} simulated s at x{speed:g}, about {length} "
            f"of wall time once the servers are up; {leave}")


def _require_smg() -> None:
    """The fleet demo runs the real gateway: say how to get it before anything starts."""
    import shutil
    from pathlib import Path

    if not (Path(sys.executable).parent / "smg").is_file() and shutil.which("smg") is None:
        raise UsageError("--fleet: the gateway (smg) is not installed: pip install smg")


def apply_overrides(layout, *, levels=None, speed=None, level_duration=None, slo_ttft=None, slo_tpot=None,
                    is_sim=lambda arm: True) -> None:
    """The command line's values in place of the layout's: the ramp plan is built anew from the
    layout's with them and validated as a whole (a bad value is a UsageError naming the flag)."""
    if layout.ramp is not None:
        changes = {}
        if slo_ttft is not None:
            changes["slo_ttft_s"] = slo_ttft
        if slo_tpot is not None:
            changes["slo_tpot_s"] = slo_tpot
        if levels is not None:
            changes["levels"] = list(levels)
        if level_duration is not None:
            changes["level_duration_s"] = level_duration
            changes["requests_per_level"] = None
            # keep a quarter of the level at least for the statistics
            settle = layout.ramp.settle_s
            if isinstance(level_duration, (int, float)) and level_duration > 0:
                settle = min(settle, level_duration / 4)
            changes["settle_s"] = settle
        if changes:
            layout.ramp = replace_plan(layout.ramp, **changes)
    if speed is not None:
        for arm in layout.launched:
            if is_sim(arm):
                arm.launch.flags["speed"] = speed

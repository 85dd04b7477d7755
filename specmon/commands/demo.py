"""`specmon demo`: layouts/demo.yaml (two simulated RTX PRO 6000 servers, FP8 vs NVFP4 with MTP),
launched, ramped and watched, with the command line's overrides:
--levels, --speed (the simulator's), --level-duration (simulated seconds), --out, --layout,
--slo-ttft / --slo-tpot (seconds; the SLO and goodput knees in session.json)."""

from __future__ import annotations

import sys


def run(args) -> int:
    from specmon.commands.launch import run_layout
    from specmon.servers.layout import is_sim_command, load_layout

    layout, warnings = load_layout(args.layout or "demo")
    for w in warnings:
        print(f"specmon: warning: {w}", file=sys.stderr)
    apply_overrides(layout, levels=args.levels, speed=args.speed, level_duration=args.level_duration,
                    slo_ttft=getattr(args, "slo_ttft", None), slo_tpot=getattr(args, "slo_tpot", None),
                    is_sim=lambda arm: is_sim_command(layout.server_command(arm)))
    return run_layout(layout, out=args.out, headless=args.headless, interval=None, title="specmon demo")


def apply_overrides(layout, *, levels=None, speed=None, level_duration=None, slo_ttft=None, slo_tpot=None,
                    is_sim=lambda arm: True) -> None:
    if layout.ramp is not None:
        if slo_ttft:
            layout.ramp.slo_ttft_s = slo_ttft
        if slo_tpot:
            layout.ramp.slo_tpot_s = slo_tpot
        if levels:
            layout.ramp.levels = list(levels)
        if level_duration:
            layout.ramp.level_duration_s = level_duration
            layout.ramp.requests_per_level = None
            # keep a quarter of the level at least for the statistics
            layout.ramp.settle_s = min(layout.ramp.settle_s, level_duration / 4)
    if speed:
        for arm in layout.launched:
            if is_sim(arm):
                arm.launch.flags["speed"] = speed

"""`specmon launch LAYOUT.yaml [--out DIR] [--headless]`: start the layout's servers, ramp them if
the layout has a ramp, watch, record; stop every launched server at the end (wiring.run_layout).

The layout and the workload are checked before anything starts (exit 2, one line). Exit 3 when no
launched server came up (with each one's cause and log tail). Warnings about flag combinations
SGLang rejects at startup are printed first.
"""

from __future__ import annotations

import sys

from specmon.wiring import run_layout


def run(args) -> int:
    from specmon.servers.layout import load_layout

    layout, warnings = load_layout(args.layout)
    for w in warnings:
        print(f"specmon: warning: {w}", file=sys.stderr)
    return run_layout(layout, out=args.out, headless=args.headless, interval=args.interval,
                      title=f"specmon launch {layout.name}",
                      metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                      gateway_key_env=args.gateway_key_env)

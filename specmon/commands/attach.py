"""`specmon attach URL... [--name NAME=URL] [--api-key-env VAR] [--headless --duration S]`,
`specmon attach --prometheus URL [--selector S] [--interval S]` (a fleet as Prometheus sees it); a URL that
is a gateway (smg) is watched as its workers (`--gateway-metrics URL`; `--no-discover`: as one server).

Read-only: only GETs (/metrics, /server_info, /v1/loads). Exit 0 when at least one server
answered during the session; 3 when none ever did (each named with its last reason); 2 for
bad usage (a malformed URL, a missing env var), before anything starts.

`--request-metrics-dir DIR` (or NAME=DIR, repeatable): the folder a server on this host writes
with `--export-metrics-to-file-dir`; its lines are read, never written or locked
(sources/request_metrics.py), into observed_requests.csv and per-window aggregates.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from specmon.session.segments import Rotation

from specmon.wiring import (
    arms_from_args, SessionOutcome, gateway_fleets, gateway_key_var, prometheus_fleets, run_front_end,
    start_metrics,
)


def rotation(rotate: tuple, retain: Optional[tuple]) -> "Rotation":
    """--rotate and --retain (each an age or a size, parsed by the flags' type) as one Rotation."""
    from specmon.session.segments import Rotation

    every_s, max_bytes = rotate
    retain_s, retain_bytes = retain or (None, None)
    return Rotation(every_s=every_s, max_bytes=max_bytes, retain_s=retain_s, retain_bytes=retain_bytes)


def run(args) -> int:
    arms = arms_from_args(list(args.urls), list(args.name), args.api_key_env) if (
        args.urls or args.name or args.prometheus is None) else []
    prometheus = prometheus_fleets(args.prometheus, args.selector, args.interval)  # --prometheus: workers found
    # A URL that is a gateway (smg) is watched as its fleet of workers (not with --no-discover).
    arms, gateways = gateway_fleets(arms, discover=not args.no_discover, metrics_url=args.gateway_metrics,
                                    key_env=gateway_key_var(args.gateway_key_env))
    fleets = prometheus + gateways
    request_metrics = []
    if args.request_metrics_dir:  # the export folders, checked before anything starts (exit 2)
        from specmon.analysis.request_windows import RequestWindowFeed
        from specmon.sources.request_metrics import sources_from_args

        request_metrics = [RequestWindowFeed(s) for s in sources_from_args(args.request_metrics_dir,
                                                                          [a.name for a in arms])]
    from specmon.session.live import LiveSession

    consumers = start_metrics(args.metrics_port, args.metrics_host)  # --metrics-port: listening now
    live = LiveSession(arms, interval=args.interval, out_dir=Path(args.out) if args.out else None,
                       isl=args.isl, osl=args.osl, mode="attach", consumers=consumers, fleets=fleets,
                       request_metrics=request_metrics, rotation=rotation(args.rotate, args.retain))
    title = "specmon attach " + " ".join([a.url for a in arms] + [f.url for f in gateways]
                                         + [f"--prometheus {f.url}" for f in prometheus])
    outcome = SessionOutcome.of(live)  # the exit code comes from the session's end events
    run_front_end(live, headless=args.headless, duration_s=args.duration, title=title)
    code = outcome.exit_code()  # 130/143 when a signal ended it; exit 1 when recording failed
    outcome.require_an_answer(arms)
    return code

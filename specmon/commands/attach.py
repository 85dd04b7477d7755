"""`specmon attach URL... [--name NAME=URL] [--api-key-env VAR] [--headless --duration S]`; a URL that
is a gateway (smg) is watched as its workers (`--gateway-metrics URL`; `--no-discover`: as one server).

Read-only: only GETs (/metrics, /server_info, /v1/loads). Exit 0 when at least one server
answered during the session; 3 when none ever did (each named with its last reason); 2 for
bad usage (a malformed URL, a missing env var), before anything starts.
"""

from __future__ import annotations

from pathlib import Path

from specmon.wiring import arms_from_args, gateway_fleets, require_an_answer, run_front_end, start_metrics


def run(args) -> int:
    arms = arms_from_args(list(args.urls), list(args.name), args.api_key_env)
    # A URL that is a gateway (smg) is watched as its fleet of workers (not with --no-discover).
    arms, fleets = gateway_fleets(arms, discover=not args.no_discover, metrics_url=args.gateway_metrics)
    from specmon.session.live import LiveSession

    consumers = start_metrics(args.metrics_port, args.metrics_host)  # --metrics-port: listening now
    live = LiveSession(arms, interval=args.interval, out_dir=Path(args.out) if args.out else None,
                       isl=args.isl, osl=args.osl, mode="attach", consumers=consumers, fleets=fleets)
    run_front_end(live, headless=args.headless, duration_s=args.duration,
                  title="specmon attach " + " ".join([a.url for a in arms] + [f.url for f in fleets]))
    require_an_answer(live, arms)
    return 0

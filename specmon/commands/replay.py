"""`specmon replay SESSION_DIR [--speed X] [--headless]`: play a recorded session again.

`specmon replay --prometheus URL --from T [--to T] [--selector S] [--step S] [--out DIR]`: rebuild
a past window of a Prometheus fleet into a session folder (session/history.py), then play it the
same way (--headless: write the folder only and say where). Times: RFC 3339, unix seconds, or
before now like -1h. A window with no SGLang series is exit 2; Prometheus not answering, exit 3.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from specmon.errors import ServerError, UsageError
from specmon.session.replay import ReplaySource
from specmon.wiring import run_front_end, signal_exit


def run(args) -> int:
    history_flags = [f for f, v in (("--from", args.time_from), ("--to", args.time_to), ("--step", args.step),
                                    ("--out", args.out), ("--selector", args.selector)) if v is not None]
    if args.prometheus is None:
        if history_flags:
            raise UsageError(f"{history_flags[0]}: only with --prometheus URL")
        if args.session is None:
            raise UsageError("expected a SESSION_DIR (or --prometheus URL --from T)")
        folder = Path(args.session)
    else:
        if args.session is not None:
            raise UsageError(f"{args.session}: give a SESSION_DIR or --prometheus URL, not both")
        folder = _history(args)
        if args.headless:
            return 0
    source = ReplaySource(folder, speed=args.speed)
    title = f"replay {folder.resolve().name}"
    return signal_exit(run_front_end(source, headless=args.headless, title=title))  # 130/143: a signal


def _history(args) -> Path:
    from specmon.session.folder import RecordingError, default_out_dir
    from specmon.session.history import no_workers_line, record_history
    from specmon.sources.promfleet import (
        PrometheusHistory, PromQueryError, parse_time, prometheus_base, selector_matchers,
    )

    if args.time_from is None:
        raise UsageError("--prometheus: expected --from T (RFC 3339, unix seconds or -1h) for the window")
    now = time.time()
    times = []
    for flag, text in (("--from", args.time_from), ("--to", args.time_to or "now")):
        try:
            times.append(parse_time(text, now))
        except ValueError as e:
            raise UsageError(f"{flag}: {e}") from None
    for flag, check, value in (("--prometheus", prometheus_base, args.prometheus),
                               ("--selector", selector_matchers, args.selector)):
        try:
            check(value)
        except ValueError as e:
            raise UsageError(f"{flag}: {e}") from None
    try:
        history = PrometheusHistory(args.prometheus, args.selector, times[0], times[1], args.step)
    except ValueError as e:  # the window's order, the step
        raise UsageError(str(e)) from None
    out = Path(args.out) if args.out else default_out_dir()

    async def main():
        try:
            if not await history.prepare():
                raise UsageError(no_workers_line(history))
            return await record_history(history, out)
        finally:
            await history.aclose()

    try:
        summary = asyncio.run(main())
    except PromQueryError as e:
        if e.kind == "bad_query":
            raise UsageError(f"--selector {history.selector}: Prometheus refused it ({e.message})") from None
        raise ServerError(f"Prometheus at {history.url}: {e.describe()}") from None
    except ValueError as e:  # too many steps
        raise UsageError(str(e)) from None
    except RecordingError as e:
        raise UsageError(str(e)) from None
    print(f"specmon: {summary.workers} worker(s), {summary.steps} steps of {history.step_s:g} s "
          f"({summary.rows} rows, {summary.queries} Prometheus requests) recorded in {out}",
          file=sys.stderr, flush=True)
    return out

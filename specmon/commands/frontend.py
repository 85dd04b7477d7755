"""What every watching command does last: run the session through the TUI or headless, then say
whether any server ever answered. One place, so attach, ramp, launch and replay behave alike."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from specmon.errors import ServerError


def run_front_end(live: Any, *, headless: bool, title: str, duration_s: Optional[float] = None,
                  ramp: Any = None) -> str:
    """Runs `live` (a LiveSession or a ReplaySource) to its end; returns the exit reason.
    Headless with a ramp, the whole per-level table is printed once more at the end."""
    if not headless:
        from specmon.tui.app import run_tui  # lazy: the data core never imports Textual

        return run_tui(live, title=title)
    from specmon.headless import run_headless

    reason = run_headless(live, duration_s)
    results = [r for rs in zip(*ramp.results.values()) for r in rs] if ramp is not None else []
    if results:
        from specmon.analysis.table import format_level_table

        print(format_level_table(results))
    return reason


def require_an_answer(live: Any, arms: Sequence[Any]) -> None:
    """Exit code 3 when not one server answered during the whole session, naming each and why."""
    never = [c for c in (live.collector(a.name) for a in arms) if c is not None and not c.ever_up]
    if never and len(never) == len(arms):
        names = "; ".join(f"{c.spec.name} ({c.spec.url}): {c.last_reason or c.last_state}" for c in never)
        raise ServerError(f"no server answered: {names}")

"""`specmon replay SESSION_DIR [--speed X] [--headless]`: play a recorded session again."""

from __future__ import annotations

from pathlib import Path

from specmon.session.replay import ReplaySource


def run(args) -> int:
    source = ReplaySource(Path(args.session), speed=args.speed)
    title = f"replay {Path(args.session).resolve().name}"
    if getattr(args, "headless", False):
        from specmon.headless import run_headless

        run_headless(source, None)
        return 0
    from specmon.tui.app import run_tui

    run_tui(source, title)
    return 0

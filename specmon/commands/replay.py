"""`specmon replay SESSION_DIR [--speed X] [--headless]`: play a recorded session again."""

from __future__ import annotations

from pathlib import Path

from specmon.session.replay import ReplaySource
from specmon.wiring import run_front_end


def run(args) -> int:
    source = ReplaySource(Path(args.session), speed=args.speed)
    title = f"replay {Path(args.session).resolve().name}"
    run_front_end(source, headless=args.headless, title=title)
    return 0

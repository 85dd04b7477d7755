"""What the TUI app's tests share across tiers: the kinds of events a session emitted."""

from __future__ import annotations

from specmon.tui import messages as msg


def event_kinds(seen) -> list[str]:
    """The app's messages in order, named by the event each carries (LiveStopped has none)."""
    return [type(m.event).__name__ if isinstance(m, msg.EventMessage) else type(m).__name__
            for m in seen if isinstance(m, (msg.EventMessage, msg.LiveStopped))]

"""What the simulated-GPU tests share across tiers: the GPU panes' text and a wait for the app."""

from __future__ import annotations

from helpers import pilots  # noqa: E402
from specmon.tui.widgets.arm_panel import ArmPanel  # noqa: E402


def text(widget) -> str:
    return str(widget.render())


def gpu_text(panel: ArmPanel) -> str:
    """The GPU pane's lines as its arm's panel draws them; in compact mode (one line per arm: the
    pane not drawn) the lines the pane builds for the panel's width."""
    if panel.compact:
        return "\n".join(t.plain for t in panel.panes["gpu"].lines(panel.size.width))
    return panel.part_text("gpu")


async def wait_for(pilot, cond, timeout=30.0, what="condition"):
    await pilots.wait_for(pilot, cond, timeout, what)

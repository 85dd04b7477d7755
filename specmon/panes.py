"""The panes a layout's `panes:` key can name: the one list the layout validates against and the
TUI shows from (None or all of them: everything shows)."""

from __future__ import annotations

# In each arm's panel, in this order.
ARM_PANES = ("gpu", "kv", "accept", "queue", "throughput", "ttft", "curve")
# The rest of the screen: the arm panels at all, the ramp's per-level table, the knee banner,
# the server logs ("gpu" also hides the GPU strip above the arms).
SCREEN_PANES = ("arms", "levels", "knee", "log")
PANES = ARM_PANES + SCREEN_PANES


def shown(panes: "list[str] | None", name: str) -> bool:
    return panes is None or name in panes

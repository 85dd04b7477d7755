"""The load generator: what the rest of specmon may use of it, and nothing else.

A level's plan goes in (a Workload's prompts, a Trace's arrivals, arrival_times for open-loop
levels, sent by GenerateClient on a LoadLoop); out come one RequestOutcome per request (its token
stamps as TokenStamps) and the level's LoadClientStats (LoadLoop.level_stats). How a response is
read (httptools framing, the C reader or the Python one), paced and stamped stays inside; the
import contract in pyproject.toml holds every other package to the names below.

The names are imported on first use (PEP 562): `specmon attach` never loads the client, and the
command line's Workload costs no HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "GenerateClient": "client", "RequestOutcome": "client", "TokenStamps": "client",
    "LoadLoop": "loop",
    "Workload": "workload", "Prompt": "workload", "arrival_times": "workload",
    "Trace": "trace", "trace_from_plan": "trace", "warn_skipped": "trace",
}
__all__ = ["GenerateClient", "LoadLoop", "Prompt", "RequestOutcome", "TokenStamps", "Trace", "Workload",
           "arrival_times", "trace_from_plan", "warn_skipped"]

if TYPE_CHECKING:
    from specmon.load.client import GenerateClient, RequestOutcome, TokenStamps
    from specmon.load.loop import LoadLoop
    from specmon.load.trace import Trace, trace_from_plan, warn_skipped
    from specmon.load.workload import Prompt, Workload, arrival_times


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'specmon.load' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"specmon.load.{module}"), name)
    globals()[name] = value  # the next lookup is a plain one
    return value

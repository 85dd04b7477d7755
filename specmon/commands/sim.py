"""`specmon sim`: a simulated SGLang server (see specmon/servers/sim/)."""

from __future__ import annotations


def run(argv: list[str]) -> int:
    from specmon.servers.sim.main import run as sim_run

    return sim_run(list(argv))

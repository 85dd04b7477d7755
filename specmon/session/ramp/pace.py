"""The pace a server really kept over a level (server seconds per wall second), from its own
meta_info stamps: server_pace over the level, request_pace per request. Pure helpers."""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

from specmon.load import RequestOutcome

PACE_TOLERANCE = 0.03
# A level whose pace (server seconds per wall second over the level) is under this share of its
# requests' median pace held a stall: the next level is planned with the median instead.
STALL_PACE_SHARE = 0.5


def _server_stamped(outcomes: Sequence[RequestOutcome]) -> Iterator[tuple[RequestOutcome, float, float]]:
    """(request, received, finished on the server's clock) of each request that finished ok
    with both stamps in its final meta_info."""
    for o in outcomes:
        m = o.final_meta or {}
        rx, fin = m.get("request_received_ts"), m.get("request_finished_ts")
        if o.status == "ok" and o.t_end is not None and isinstance(rx, (int, float)) and isinstance(fin, (int, float)):
            yield o, rx, fin


def server_pace(outcomes: Sequence[RequestOutcome]) -> Optional[float]:
    """Server seconds per wall second over a level, from the server's own stamps.

    With --enable-metrics the final meta_info carries request_received_ts and
    request_finished_ts (the simulator writes its simulated clock there). Their span over the
    level, divided by the wall span the client saw for the same requests, is the pace the server
    really ran at: ~1 for a real server, ~X for a simulator that keeps up with --speed X, less
    when the simulator is CPU-bound and holds its clock back. None without those stamps.
    """
    first_rx = last_fin = first_sent = last_end = None
    for o, rx, fin in _server_stamped(outcomes):
        end = o.wall(o.t_end)
        first_rx = rx if first_rx is None else min(first_rx, rx)
        last_fin = fin if last_fin is None else max(last_fin, fin)
        first_sent = o.t_sent_wall if first_sent is None else min(first_sent, o.t_sent_wall)
        last_end = end if last_end is None else max(last_end, end)
    if first_rx is None or last_end - first_sent <= 1.0:
        return None  # under a wall second the network and HTTP latencies would dominate
    return (last_fin - first_rx) / (last_end - first_sent)


def request_pace(outcomes: Sequence[RequestOutcome], min_wall_s: float = 0.01) -> Optional[float]:
    """The median over the level's requests of each one's server span over its wall span
    (requests of at least min_wall_s wall seconds). Unlike server_pace it is not pulled down by a
    stretch in which the server's clock stood still (a stalled simulator): only the few requests
    in flight then are slow. A request's HTTP latency makes it read a few % low at x50: a
    figure to plan the next level with, not to scale figures by. None with fewer than 5."""
    paces = []
    for o, rx, fin in _server_stamped(outcomes):
        wall = o.wall(o.t_end) - o.t_sent_wall
        if wall >= min_wall_s and fin > rx:
            paces.append((fin - rx) / wall)
    if len(paces) < 5:
        return None
    paces.sort()
    n = len(paces)
    return paces[n // 2] if n % 2 else (paces[n // 2 - 1] + paces[n // 2]) / 2

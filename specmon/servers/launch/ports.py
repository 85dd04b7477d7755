"""Ports for launched servers: free ones picked below the kernel's ephemeral range, and the ones a
server's flags name (kept out of the automatic picks)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from specmon.errors import ServerError


# Ports specmon picks for launched servers come from below the kernel's ephemeral range when it
# leaves room: a port from bind(0) is one the kernel hands out again, to the next bind(0) or to an
# outgoing connection's local end, in the seconds between the pick and the server's own bind.
AUTO_PORTS = (20000, 32768)


def ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1", avoid: frozenset[int] | set[int] = frozenset()) -> int:
    """A port nothing listens on and not in avoid: a random one in AUTO_PORTS outside the ephemeral
    range, or the kernel's pick where that range covers AUTO_PORTS."""
    lo, hi = AUTO_PORTS
    elo, ehi = ephemeral_range()
    room = [(lo, min(hi, elo)), (max(lo, ehi + 1), hi)]
    room = [(a, b) for a, b in room if b - a >= 100]
    rng = random.Random()
    for _ in range(50):
        if room:
            a, b = rng.choice(room)
            port = rng.randrange(a, b)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        if port not in avoid and port_free(host, port):
            return port
    raise ServerError(f"no free TCP port found on {host}")


def named_ports(flags: dict) -> set[int]:
    """The ports a server's flags name (port, disaggregation_bootstrap_port, metrics ports...): kept
    out of the automatic picks, so no two servers of a layout get the same one."""
    return {v for k, v in flags.items() if k.endswith("port") and isinstance(v, int) and not isinstance(v, bool)}


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (SO_REUSEADDR: a TIME_WAIT leftover does not count,
    as it does not stop uvicorn, which sets the same option)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True

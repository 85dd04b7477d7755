"""A ceiling on what specmon asks of one server: at most MAX_GETS_PER_S GETs in any second, all
its arms together.

The --interval floor bounds one arm's ticks, but not the server: ten `--name` arms on one URL
(or a URL given twice) each scrape it every tick, and an arm's tick can ask /server_info, its
old name, /metrics and /v1/loads. Every SGLang GET first takes a slot in its server's window (a
server is scheme://host:port); past the ceiling it waits for the oldest slot to leave the window,
so the scrape answers later (and is marked late past its deadline) rather than asking more.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator, Optional
from urllib.parse import urlsplit

MAX_GETS_PER_S = 20  # 0.1 s ticks of one arm ask ~10-12 a second; the rest is headroom
WINDOW_S = 1.0


class ServerPace:
    """The GETs of the last second to one server. A GET holds its slot from when it is sent until
    one second after its answer ended (not after it was sent): a request slowed on its way (a
    loaded host, a slow accept) then still arrives at the server at least a second after the
    request whose slot it takes, so the server itself never counts more than `per_s` in a second."""

    def __init__(self, per_s: int = MAX_GETS_PER_S) -> None:
        self.per_s = per_s
        self._slots: list[list[Optional[float]]] = []  # [when its answer ended], [None] in flight

    def _try(self, now: float) -> tuple[Optional[list], float]:
        """A slot, or how long to wait before trying again."""
        self._slots = [x for x in self._slots if x[0] is None or now - x[0] < WINDOW_S]
        if len(self._slots) < self.per_s:
            slot: list[Optional[float]] = [None]
            self._slots.append(slot)
            return slot, 0.0
        ended = [x[0] for x in self._slots if x[0] is not None]
        return None, (WINDOW_S - (now - min(ended)) + 1e-3) if ended else 0.05

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        while True:
            slot, wait = self._try(time.monotonic())
            if slot is not None:
                break
            await asyncio.sleep(wait)
        try:
            yield
        finally:
            slot[0] = time.monotonic()


_PACES: dict[str, ServerPace] = {}


def server_key(url: str) -> str:
    try:
        u = urlsplit(url)
        port = u.port or (443 if u.scheme == "https" else 80)
        return f"{u.scheme}://{(u.hostname or '').lower()}:{port}"
    except ValueError:
        return url


def pace_for(url: str) -> ServerPace:
    """The one window of the server at `url`, shared by every arm that watches it (one process)."""
    key = server_key(url)
    pace = _PACES.get(key)
    if pace is None:
        pace = _PACES[key] = ServerPace()
    return pace

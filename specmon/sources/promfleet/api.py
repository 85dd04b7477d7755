"""Prometheus's HTTP API: its base URL, GETs bounded in time and size (_Api), and the queries of
one evaluation asked at once. Every failure is a PromQueryError naming the query."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

# httpx (~0.16 s to import) only when a GET needs it (sources/get.py).
if TYPE_CHECKING:
    import httpx

from specmon.sources.get import GetFailed, SourceGet
from specmon.sources.promfleet.parse import Point, PromQueryError, api_data

MAX_BODY_BYTES = 64 * 2**20
KEEP_IDLE = 16  # a poll asks all its queries at once: their connections are kept for the next poll


def prometheus_base(url: str) -> str:
    """http(s)://host[:port][/prefix] without a trailing slash; ValueError otherwise."""
    text = (url or "").strip() if isinstance(url, str) else ""
    expected = f"expected Prometheus's URL like http://127.0.0.1:9090, got {url!r}"
    if not text or not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError(expected)
    try:
        u = urlsplit(text)
        port = u.port
    except ValueError:
        raise ValueError(expected) from None
    if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or port == 0:
        raise ValueError(expected)
    return f"{u.scheme}://{u.netloc}{u.path.rstrip('/')}"


class _Api:
    """GETs of Prometheus's HTTP API, bounded in time and size; every failure a PromQueryError."""

    def __init__(self, base: str, timeout_s: float, transport: Optional[httpx.AsyncBaseTransport] = None):
        self.base, self.timeout_s = base, timeout_s
        self.requests = 0
        self._get = SourceGet(base, timeout_s, transport, keep_idle=KEEP_IDLE)

    async def aclose(self) -> None:
        await self._get.aclose()

    async def get(self, path: str, params: Optional[dict[str, str]] = None) -> Any:
        self.requests += 1
        try:
            # the client's timeout bounds each read, not an answer that trickles in
            status, body = await asyncio.wait_for(
                self._get.get(self.base + path, {}, MAX_BODY_BYTES, params=params, body_for=None), self.timeout_s)
        except asyncio.TimeoutError:
            raise PromQueryError(f"no complete answer within {self.timeout_s:g} s", "timeout") from None
        except GetFailed as f:
            raise self._error(f) from None
        if status != 200:
            try:
                api_data(body)
            except PromQueryError as e:
                if e.kind != "bad_answer":
                    raise PromQueryError(f"HTTP {status}, {e.message}", e.kind) from None
            raise PromQueryError(f"HTTP {status}", "error")
        return api_data(body)

    def _error(self, f: GetFailed) -> PromQueryError:
        if f.kind == "too_large":
            return PromQueryError(f"answer over {MAX_BODY_BYTES // 2**20} MiB", "bad_answer")
        if f.kind == "refused":
            return PromQueryError(f"connection refused at {self.base}", "refused")
        if f.kind in ("unresolved", "down"):
            return PromQueryError(f"cannot connect to {self.base}: {f.words[:160]}", "down")
        if f.kind == "timeout":
            return PromQueryError(f"no answer within {self.timeout_s:g} s", "timeout")
        if f.kind == "setup":
            return PromQueryError(f.words, "error")
        return PromQueryError(f"{f.cause}: {f.words[:160]}", "down")


async def _gather_queries(api: _Api, path: str, queries: dict[str, str], params: dict[str, str],
                          parse) -> dict[str, list[Point]]:
    """Every query at once; the first failure (in the queries' order) is raised, naming its query."""
    names = list(queries)
    answers = await asyncio.gather(*(api.get(path, {"query": queries[n], **params}) for n in names),
                                   return_exceptions=True)
    out: dict[str, list[Point]] = {}
    for n, a in zip(names, answers):
        if isinstance(a, BaseException):
            if isinstance(a, PromQueryError):
                raise PromQueryError(a.message, a.kind, n, queries[n])
            if isinstance(a, asyncio.CancelledError):
                raise a
            raise PromQueryError(f"{type(a).__name__}: {str(a)[:160]}", "error", n, queries[n])
        try:
            out[n] = parse(a)
        except PromQueryError as e:
            raise PromQueryError(e.message, e.kind, n, queries[n]) from None
    return out


async def _one(api: _Api, path: str, name: str, params: Optional[dict[str, str]] = None) -> Any:
    try:
        return await api.get(path, params)
    except PromQueryError as e:
        raise PromQueryError(e.message, e.kind, name, path) from None

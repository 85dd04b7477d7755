"""Prometheus's HTTP API: its base URL, GETs bounded in time and size (_Api), and the queries of
one evaluation asked at once. Every failure is a PromQueryError naming the query."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

# httpx (~0.16 s to import) is imported when a Prometheus fleet is read, not at every start.
if TYPE_CHECKING:
    import httpx

from specmon.sources.http import is_refused
from specmon.sources.promfleet.parse import Point, PromQueryError, api_data
from specmon.urls import is_loopback

MAX_BODY_BYTES = 64 * 2**20


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
        import httpx

        if is_loopback(base):  # a proxy from the environment cannot reach this machine's loopback
            self.client = httpx.AsyncClient(timeout=timeout_s, transport=transport, trust_env=False,
                                            follow_redirects=False)
        else:
            self.client = httpx.AsyncClient(timeout=timeout_s, transport=transport, follow_redirects=False)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def get(self, path: str, params: Optional[dict[str, str]] = None) -> Any:
        self.requests += 1
        url = self.base + path
        try:
            return await asyncio.wait_for(self._get(url, params), self.timeout_s)
        except asyncio.TimeoutError:
            raise PromQueryError(f"no complete answer within {self.timeout_s:g} s", "timeout") from None

    async def _get(self, url: str, params: Optional[dict[str, str]]) -> Any:
        import httpx

        try:
            async with self.client.stream("GET", url, params=params) as r:
                body = bytearray()
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise PromQueryError(f"answer over {MAX_BODY_BYTES // 2**20} MiB", "bad_answer")
                status = r.status_code
        except httpx.ConnectError as e:
            if is_refused(e):
                raise PromQueryError(f"connection refused at {self.base}", "refused") from None
            raise PromQueryError(f"cannot connect to {self.base}: {str(e)[:160] or type(e).__name__}", "down") from None
        except httpx.TimeoutException:
            raise PromQueryError(f"no answer within {self.timeout_s:g} s", "timeout") from None
        except httpx.HTTPError as e:
            raise PromQueryError(f"{type(e).__name__}: {str(e)[:160]}", "down") from None
        if status != 200:
            try:
                api_data(bytes(body))
            except PromQueryError as e:
                if e.kind != "bad_answer":
                    raise PromQueryError(f"HTTP {status}, {e.message}", e.kind) from None
            raise PromQueryError(f"HTTP {status}", "error")
        return api_data(bytes(body))


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

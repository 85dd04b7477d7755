"""The GETs of a gateway source: the lean client for plain http, httpx for the rest, the same
(status, body, problem) answers either way; bodies read up to a cap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

# httpx (~0.16 s to import) is imported where it is used: the lean client (sources/http.py) does
# the plain-http scrapes, httpx only TLS, proxies and injected transports.
if TYPE_CHECKING:
    import httpx

from specmon.sources import http
from specmon.sources.serverinfo import json_body
from specmon.sources.sglang import is_loopback_url, lean_target, shared_ssl_context

JSON_MAX_BYTES = 8 * 2**20
METRICS_MAX_BYTES = 32 * 2**20


def _client(url: str, timeout_s: float, transport: Optional[httpx.AsyncBaseTransport] = None) -> httpx.AsyncClient:
    import httpx

    # As the workers' collector: a proxy from the environment is never used for a loopback address.
    if is_loopback_url(url):
        return httpx.AsyncClient(timeout=timeout_s, transport=transport, follow_redirects=False, trust_env=False,
                                 verify=shared_ssl_context())
    return httpx.AsyncClient(timeout=timeout_s, transport=transport, follow_redirects=False,
                             verify=shared_ssl_context())


async def _get(client: httpx.AsyncClient, url: str, headers: dict, max_bytes: int) -> tuple[Optional[int], bytes, str]:
    """GET url: (status, body, problem). status None when nothing answered; the body is read
    (streaming, up to max_bytes) for 200 and 503 answers only."""
    import httpx

    try:
        async with client.stream("GET", url, headers=headers) as r:
            if r.status_code not in (200, 503):
                return r.status_code, b"", ""
            body = bytearray()
            async for chunk in r.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    return None, b"", f"{urlsplit(url).path} body over {max_bytes // 2**20} MiB"
            return r.status_code, bytes(body), ""
    except httpx.ConnectError as e:
        return None, b"", "connection refused" if http.is_refused(e) else f"cannot connect ({str(e)[:120] or type(e).__name__})"
    except httpx.TimeoutException:
        return None, b"", "no answer in time"
    except (httpx.HTTPError, OSError) as e:
        return None, b"", f"{type(e).__name__}: {str(e)[:120]}"


class _Http:
    """The GETs of one gateway source: the lean client (sources/http.py) for a plain-http address
    (one kept-alive connection or a few per host and port: the gateway, its metrics port), httpx
    for the rest (TLS, proxies, credentials, an injected transport). The same answers and
    problems either way."""

    def __init__(self, url: str, timeout_s: float, transport: Optional[httpx.AsyncBaseTransport] = None):
        self.url = url
        self.timeout_s = timeout_s
        self.transport = transport
        self.client: Optional[httpx.AsyncClient] = None  # made when a URL needs httpx (slow to import)
        self._lean: dict[tuple[str, int], http.LeanClient] = {}
        self._targets: dict[str, Optional[tuple[str, int, str]]] = {}  # url -> lean_target(url), asked once

    async def get(self, url: str, headers: dict, max_bytes: int) -> tuple[Optional[int], bytes, str]:
        try:
            target = self._targets[url]
        except KeyError:
            target = self._targets[url] = lean_target(url) if self.transport is None else None
        if target is None:
            if self.client is None:
                self.client = _client(self.url, self.timeout_s, self.transport)
            return await _get(self.client, url, headers, max_bytes)
        host, port, path = target
        c = self._lean.get((host, port))
        if c is None:
            c = self._lean[(host, port)] = http.LeanClient(host, port, self.timeout_s)
        try:
            status, body = await c.get(path or "/", headers, max_bytes, read_body=lambda st: st in (200, 503))
        except http.TooLarge:
            return None, b"", f"{urlsplit(url).path} body over {max_bytes // 2**20} MiB"
        except http.Refused:
            return None, b"", "connection refused"
        except (http.Unresolved, http.ConnectFailed) as e:
            return None, b"", f"cannot connect ({str(e)[:120] or type(e).__name__})"
        except http.ReadTimeout:
            return None, b"", "no answer in time"
        except http.HttpError as e:
            return None, b"", f"{type(e).__name__}: {str(e)[:120]}"
        return status, body, ""

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        for c in self._lean.values():
            await c.aclose()


def _json(body: bytes) -> Any:
    try:
        return json_body(body)
    except ValueError:
        return None

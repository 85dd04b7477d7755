"""The GETs of a gateway source through the sources' one GET (sources/get.py): (status, body,
problem) answers, bodies read up to a cap for 200 and 503 answers (smg's /readiness says why it is
not ready in a 503)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx

from specmon.sources.get import GetFailed, SourceGet
from specmon.sources.serverinfo import json_body

JSON_MAX_BYTES = 8 * 2**20
METRICS_MAX_BYTES = 32 * 2**20


class _Http:
    """The GETs of one gateway source (the gateway, its metrics port, a metrics port it guesses)."""

    def __init__(self, url: str, timeout_s: float, transport: Optional[httpx.AsyncBaseTransport] = None):
        self._get = SourceGet(url, timeout_s, transport)

    async def get(self, url: str, headers: dict, max_bytes: int) -> tuple[Optional[int], bytes, str]:
        """GET url: (status, body, problem); status None when nothing answered."""
        try:
            status, body = await self._get.get(url, headers, max_bytes, body_for=(200, 503))
        except GetFailed as f:
            return None, b"", _problem(f, url, max_bytes)
        except OSError as e:
            return None, b"", f"{type(e).__name__}: {str(e)[:120]}"
        return status, body, ""

    async def aclose(self) -> None:
        await self._get.aclose()


def _problem(f: GetFailed, url: str, max_bytes: int) -> str:
    if f.kind == "too_large":
        return f"{urlsplit(url).path} body over {max_bytes // 2**20} MiB"
    if f.kind == "refused":
        return "connection refused"
    if f.kind in ("unresolved", "down"):
        return f"cannot connect ({f.words[:120]})"
    if f.kind == "timeout":
        return "no answer in time"
    if f.kind == "setup":
        return f.words
    return f"{f.cause}: {f.words[:120]}"


def _json(body: bytes) -> Any:
    try:
        return json_body(body)
    except ValueError:
        return None

"""What answers at a URL, by GETs only: a gateway, a plain SGLang server, neither, or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

# httpx (~0.16 s to import) only when a GET needs it (sources/get.py).
if TYPE_CHECKING:
    import httpx

from specmon.sources.gateway.client import JSON_MAX_BYTES, METRICS_MAX_BYTES, _Http, _json
from specmon.sources.gateway.registry import READINESS_PATH, REGISTRY_PATH, parse_registry
from specmon.sources.prom import bare_name


def is_sglang_metrics(text: str) -> bool:
    """Does a /metrics body carry SGLang's scheduler series?"""
    for line in text.splitlines()[:50_000]:
        if line and line[0] != "#" and bare_name(line.split("{", 1)[0].split(" ", 1)[0]) == "num_running_reqs":
            return True
    return False


@dataclass
class Probe:
    kind: str  # "gateway" | "server" | "neither" | "unreachable"
    reason: str = ""


async def probe(url: str, *, api_key: Optional[str] = None, admin_key: Optional[str] = None, timeout_s: float = 3.0,
                transport: Optional[httpx.AsyncBaseTransport] = None) -> Probe:
    """What answers at url, by GETs only: a gateway (its /workers is a registry), an SGLang server
    (/server_info is a JSON object, /v1/loads lists loads or /metrics has SGLang's series),
    neither (it answers, but as neither), or nothing answers (unreachable: left to the session
    to retry). A server that answers 5xx or wants a key is taken as a server."""
    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    c = _Http(base, timeout_s, transport)
    try:
        key = admin_key or api_key
        status, body, problem = await c.get(base + REGISTRY_PATH, {"Authorization": f"Bearer {key}"} if key else {},
                                            JSON_MAX_BYTES)
        if status is None:
            return Probe("unreachable", problem)
        if status == 200 and parse_registry(_json(body)) is not None:
            return Probe("gateway")
        if status in (401, 403):
            # smg 1.x: /workers wants the admin key, its /readiness (open) says it is a gateway
            r_status, r_body, _ = await c.get(base + READINESS_PATH, {}, JSON_MAX_BYTES)
            r = _json(r_body) if r_status in (200, 503) else None
            if isinstance(r, dict) and "total_workers" in r:
                return Probe("gateway", f"{REGISTRY_PATH} answered HTTP {status}: it wants the admin key"
                                        + (" (the one given is not taken)" if admin_key else ""))
        seen = [f"{REGISTRY_PATH} {status}"]
        for path in ("/server_info", "/get_server_info", "/v1/loads", "/metrics"):
            status, body, problem = await c.get(base + path, headers, METRICS_MAX_BYTES)
            if status is None:
                seen.append(f"{path} {problem}")
                continue
            if status in (401, 403) or status >= 500:
                return Probe("server", f"{path} answered HTTP {status}")
            if status != 200:
                seen.append(f"{path} {status}")
                continue
            if path == "/metrics":
                if is_sglang_metrics(body.decode("utf-8", errors="replace")):
                    return Probe("server")
            else:
                d = _json(body)
                if path == "/v1/loads" and isinstance(d, dict) and isinstance(d.get("loads"), list):
                    return Probe("server")
                if path != "/v1/loads" and isinstance(d, dict) and ("model_path" in d or "internal_states" in d):
                    return Probe("server")
            seen.append(f"{path} 200 but not SGLang's")
        return Probe("neither", "; ".join(seen))
    finally:
        await c.aclose()


async def detect_gateway(url: str, **kw) -> bool:
    """True when url is a gateway (its GET /workers answers a worker registry)."""
    return (await probe(url, **kw)).kind == "gateway"

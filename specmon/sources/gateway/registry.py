"""The gateway's worker registry: its /workers list (sglang-router 0.3.x and smg 1.x shapes, the DP
ranks of one worker folded into one) and its /readiness."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from specmon.sources.gateway.urls import base_url
from specmon.sources.gateway.values import _count, _text

REGISTRY_PATH = "/workers"
READINESS_PATH = "/readiness"
ROLES = ("regular", "prefill", "decode")


@dataclass
class RegistryWorker:
    """One worker of the gateway's registry (DP ranks of one worker folded into one)."""

    url: str  # the worker's base URL (no @RANK)
    role: str  # regular | prefill | decode (or what the gateway says, lower case)
    healthy: Optional[bool]
    load: Optional[int]  # the gateway's own load figure for it
    bootstrap_port: Optional[int] = None
    dp_size: Optional[int] = None
    model: Optional[str] = None
    entries: list[str] = field(default_factory=list)  # the registry's URLs for it (URL@RANK under --dp-aware)


def parse_registry(d: Any) -> Optional[list[RegistryWorker]]:
    """The workers of a /workers JSON value, None when it is not a gateway's registry (no
    `workers` list). Entries that are not a worker with an http(s) URL are skipped; the DP ranks
    of one worker (`URL@RANK`) are one RegistryWorker, healthy when all its ranks are."""
    if not isinstance(d, dict) or not isinstance(d.get("workers"), list):
        return None
    by_url: dict[str, RegistryWorker] = {}
    for e in d["workers"][:100_000]:
        if not isinstance(e, dict):
            continue
        raw = e.get("url")
        url = base_url(raw) if isinstance(raw, str) else None
        if url is None:
            continue
        role = e.get("worker_type")
        role = role.strip().lower() if isinstance(role, str) and role.strip() else "regular"
        role = role[:32] if role.isprintable() else "regular"
        healthy = e.get("is_healthy") if isinstance(e.get("is_healthy"), bool) else None
        # sglang-router 0.3.x keeps the worker's facts under "metadata", smg 1.x under "labels"
        meta = e.get("metadata") if isinstance(e.get("metadata"), dict) else (
            e.get("labels") if isinstance(e.get("labels"), dict) else {})
        w = by_url.get(url)
        if w is None:
            w = by_url[url] = RegistryWorker(
                url=url, role=role, healthy=healthy, load=_count(e.get("load")),
                bootstrap_port=_count(e.get("bootstrap_port")), dp_size=_count(meta.get("dp_size")),
                model=_text(e.get("model_id")) or _text(meta.get("served_model_name")))
        else:  # another DP rank of the same worker
            if w.healthy is not None:
                w.healthy = w.healthy and healthy if healthy is not None else None
            load = _count(e.get("load"))
            w.load = None if w.load is None or load is None else w.load + load
        w.entries.append(raw[:2048])
    return list(by_url.values())


@dataclass
class Readiness:
    ready: Optional[bool]
    healthy: Optional[int]
    total: Optional[int]
    reason: Optional[str] = None


def parse_readiness(status: Optional[int], d: Any) -> Readiness:
    """/readiness: 200 with healthy_workers/total_workers, or 503 (not ready, with a reason)."""
    if status is None:
        return Readiness(None, None, None, "no answer")
    body = d if isinstance(d, dict) else {}
    healthy, total = _count(body.get("healthy_workers")), _count(body.get("total_workers"))
    if status == 200:
        return Readiness(True, healthy, total)
    if status == 503:
        return Readiness(False, healthy, total, _text(body.get("reason"), 200) or "not ready")
    return Readiness(None, None, None, f"/readiness answered HTTP {status}")

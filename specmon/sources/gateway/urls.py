"""Worker URLs as the gateway writes them (`URL@RANK` under --dp-aware, a trailing slash): the
worker's base URL, and the arm name it goes by."""

from __future__ import annotations

import functools
from typing import Optional
from urllib.parse import urlsplit


# The registry, the loads and the metrics name the same workers on every poll: each URL is read
# once (pure functions of a string; a bounded cache, so a fleet whose URLs churn cannot grow it).
def base_url(url: str) -> Optional[str]:
    """`http://h:p` of a registry URL (`http://h:p/`, `http://h:p@3` under --dp-aware); None when
    it is not an http(s) URL with a host."""
    if not isinstance(url, str) or not url or len(url) > 2048 or not url.isprintable():
        return None
    return _base_url(url)


@functools.lru_cache(maxsize=8192)
def _base_url(url: str) -> Optional[str]:
    head, at, rank = url.rpartition("@")
    if at and rank.isdigit() and "://" in head:
        url = head
    try:
        u = urlsplit(url.strip())
        host, port = u.hostname, u.port
    except ValueError:
        return None
    if u.scheme not in ("http", "https") or not host or u.username or u.password:
        return None
    netloc = f"[{host}]" if ":" in host else host
    return f"{u.scheme}://{netloc}" + (f":{port}" if port else "")


@functools.lru_cache(maxsize=8192)
def worker_name(url: str) -> str:
    """The arm name of a worker: host:port of its URL."""
    u = urlsplit(url)
    host = u.hostname or url
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{u.port}" if u.port else host

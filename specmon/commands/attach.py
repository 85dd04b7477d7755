"""`specmon attach URL... [--name NAME=URL] [--api-key-env VAR] [--headless --duration S]`.

Read-only: only GETs (/metrics, /server_info, /v1/loads). Exit 0 when at least one server
answered during the session; 3 when none ever did (each named with its last reason); 2 for
bad usage (a malformed URL, a missing env var), before anything starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from specmon.commands.frontend import require_an_answer, run_front_end
from specmon.errors import UsageError
from specmon.model import ArmSpec


def normalize_url(url: str, what: str) -> str:
    u = urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UsageError(f"{what}: expected a server URL like http://127.0.0.1:30000, got {url!r}")
    try:
        u.port
    except ValueError:
        raise UsageError(f"{what}: bad port in {url!r}")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise UsageError(f"{what}: expected the server's base URL (no path), got {url!r}")
    return f"{u.scheme}://{u.netloc}"


def _default_name(url: str, taken: set[str]) -> str:
    u = urlsplit(url)
    name = f"{u.hostname}:{u.port}" if u.port else (u.hostname or url)
    if u.hostname in ("127.0.0.1", "localhost") and u.port:
        name = f":{u.port}"
    base, i = name, 2
    while name in taken:
        name, i = f"{base}#{i}", i + 1
    return name


def arms_from_args(urls: list[str], names: list[str], api_key_env: Optional[str]) -> list[ArmSpec]:
    if api_key_env is not None and not os.environ.get(api_key_env):
        raise UsageError(f"--api-key-env {api_key_env}: the environment variable {api_key_env} is not set or empty")
    arms: list[ArmSpec] = []
    taken: set[str] = set()
    for item in names:
        if "=" not in item:
            raise UsageError(f"--name {item!r}: expected NAME=URL")
        name, url = item.split("=", 1)
        name = name.strip()
        if not name:
            raise UsageError(f"--name {item!r}: the name is empty (expected NAME=URL)")
        if name in taken:
            raise UsageError(f"--name {item!r}: the name {name!r} is used twice")
        arms.append(ArmSpec(name=name, url=normalize_url(url, f"--name {name}"), api_key_env=api_key_env))
        taken.add(name)
    for url in urls:
        norm = normalize_url(url, "URL")
        name = _default_name(norm, taken)
        arms.append(ArmSpec(name=name, url=norm, api_key_env=api_key_env))
        taken.add(name)
    if not arms:
        raise UsageError("attach: expected at least one server URL (or --name NAME=URL)")
    return arms


def run(args) -> int:
    arms = arms_from_args(list(args.urls), list(args.name), args.api_key_env)
    from specmon.session.live import LiveSession
    from specmon.session.recorder import default_out_dir

    out_dir = Path(args.out) if args.out else default_out_dir()
    live = LiveSession(arms, interval=args.interval, out_dir=out_dir, isl=args.isl, osl=args.osl, mode="attach")
    run_front_end(live, headless=args.headless, duration_s=args.duration,
                  title="specmon attach " + " ".join(a.url for a in arms))
    require_an_answer(live, arms)
    return 0

"""The gateway (smg): the command that starts it, the version it reports, and the HTTP checks that
say a launched server is ready (an arm's /health answering 200, the gateway's /workers listing
every worker healthy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Optional

import httpx


async def _gateway_lists(client: httpx.AsyncClient, url: str, expected: set[str], key: Optional[str] = None) -> bool:
    """A gateway is ready when its registry (GET /workers) lists every expected worker healthy."""
    try:
        r = await client.get(url + "/workers", headers={"Authorization": f"Bearer {key}"} if key else None)
        listed = r.json().get("workers", []) if r.status_code == 200 else []
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    healthy = {str(w.get("url", "")).rstrip("/").split("@")[0] for w in listed
               if isinstance(w, dict) and w.get("is_healthy")}
    return expected <= healthy


def _smg_command() -> list[str]:
    """`smg launch`: the first smg on PATH (an operator's newer gateway wins), else the one installed
    beside this Python (the dev extra's smg), else the bare name (its start fails with the cause)."""
    import shutil

    here = Path(sys.executable).parent / "smg"
    found = shutil.which("smg")
    return [str(Path(found).resolve()) if found else (str(here) if here.is_file() else "smg"), "launch"]


def smg_version(binary: str, env: Optional[dict[str, str]] = None) -> str:
    """What `smg --version` says (`smg 1.13.0`; sglang-router: `sgl-model-gateway 0.3.2`), or why not."""
    try:
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, env=env,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({type(e).__name__})"
    lines = (p.stdout or p.stderr or "").strip().splitlines()
    return lines[0][:120] if p.returncode == 0 and lines else f"unknown (--version exited {p.returncode})"


async def _health_ok(client: httpx.AsyncClient, url: str) -> bool:
    try:
        r = await client.get(url + "/health")
        return r.status_code == 200
    except httpx.HTTPError:
        return False

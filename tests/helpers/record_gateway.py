"""Record what specmon reads from the installed `smg` gateway into tests/data/<folder>/, so the
shapes of a gateway release stay tested (tests/unit/test_gateway_fixtures.py) after the dev extra moves
on to a newer one.

    .venv/bin/python tests/helpers/record_gateway.py tests/data/gateway-0.3.2

Two setups, each behind the real gateway on 127.0.0.1: `regular/` (worker a plain, worker b with 2
DP ranks) and `pd/` (one prefill, one decode). Requests are kept in flight while the routes are
read, so loads and active-request series are not all zero. Each folder gets one file per route
(`<route>.json` or `.prom`, with its HTTP status in meta.json) and meta.json (the version, the
worker URLs and roles the files name, the smg flags). Nothing here reaches past this machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, where the helpers package is

from helpers.gatewayproc import SMG, smg_version, start_gateway  # noqa: E402
from helpers.simproc import free_port, start_sim  # noqa: E402

KEY = "recorded-admin-key"  # smg 1.x: its worker routes answer 401 without it (recorded too)
ROUTES = ("/workers", "/list_workers", "/readiness", "/get_loads", "/engine_metrics", "/v1/models",
          "/get_server_info", "/health")


def get(url: str, headers: dict | None = None) -> tuple[int | None, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return None, str(e).encode()


def keep_busy(url: str, stop: threading.Event, n: int = 6) -> list[threading.Thread]:
    def one():
        while not stop.is_set():
            body = json.dumps({"text": "a long answer keeps the worker busy",
                               "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}).encode()
            req = urllib.request.Request(url + "/generate", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    r.read()
            except OSError:
                time.sleep(0.2)
    ts = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in ts:
        t.start()
    return ts


def record(out: Path, gw, workers: dict[str, dict], flags: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    keep_busy(gw.url, stop)
    time.sleep(2.5)  # requests in flight on every worker; the gateway's gauges have moved
    statuses = {}
    without_key = {}
    for route in ROUTES:
        status, body = get(gw.url + route, gw.auth())
        statuses[route] = status
        if gw.admin_key:
            without_key[route] = get(gw.url + route)[0]
        name = route.strip("/").replace("/", "_")
        (out / f"{name}.{'prom' if route == '/engine_metrics' else 'json'}").write_bytes(body)
    status, body = get(gw.metrics_url)
    statuses["prometheus"] = status
    (out / "prometheus.prom").write_bytes(body)
    stop.set()
    (out / "meta.json").write_text(json.dumps({
        "version": version(), "gateway": gw.url, "metrics": gw.metrics_url, "workers": workers,
        "flags": flags, "status": statuses, "status_without_admin_key": without_key or None, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }, indent=1) + "\n")


def version() -> str:
    p = subprocess.run([SMG, "--version"], capture_output=True, text=True, timeout=30)
    return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr).strip() else "unknown"


def main(dest: str) -> None:
    out = Path(dest)
    model = tempfile.mkdtemp(prefix="specmon-model-")
    speed = "5"
    with start_sim("--enable-metrics", "--model-path", model, speed=float(speed)) as a, \
         start_sim("--enable-metrics", "--model-path", model, "--dp-size", "2", speed=float(speed)) as b:
        flags = ["--worker-urls", a.url, b.url, "--policy", "round_robin"]
        with start_gateway(*flags, workers=2, admin_key=KEY if smg_version() >= (1,) else None) as gw:
            record(out / "regular", gw, {a.url: {"role": "regular", "dp_size": 1},
                                         b.url: {"role": "regular", "dp_size": 2}}, flags)
    boot = free_port()
    with start_sim("--enable-metrics", "--model-path", model, "--disaggregation-mode", "prefill",
                   "--disaggregation-bootstrap-port", str(boot), speed=float(speed)) as pre, \
         start_sim("--enable-metrics", "--model-path", model, "--disaggregation-mode", "decode",
                   speed=float(speed)) as dec:
        flags = ["--pd-disaggregation", "--prefill", pre.url, str(boot), "--decode", dec.url]
        with start_gateway(*flags, workers=2) as gw:
            record(out / "pd", gw, {pre.url: {"role": "prefill", "dp_size": 1},
                                    dec.url: {"role": "decode", "dp_size": 1}}, flags)
    print(f"recorded {version()} into {out}")


if __name__ == "__main__":
    main(sys.argv[1])

"""What the smg gateway's tests share across tiers: simulated workers' model folder, requests
sent through the router."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

from helpers.gatewayproc import start_gateway
from helpers.simproc import start_sim


SPEED = 20.0


def post(url: str, body: dict, timeout: float = 30.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    # A local (empty) model folder: the gateway loads a worker's tokenizer from its model path and
    # would look a non-local name up on the internet.
    return str(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def regular(model_dir, tmp_path_factory):
    """Worker a (plain), worker b (2 DP ranks, cap 4 a rank), worker c (not registered yet), behind
    one gateway in regular mode. Each sim logs the requests it gets."""
    logs = tmp_path_factory.mktemp("reqlogs")
    with start_sim("--enable-metrics", "--model-path", model_dir, "--request-log", str(logs / "a.log"),
                   speed=SPEED) as a, \
         start_sim("--enable-metrics", "--model-path", model_dir, "--dp-size", "2", "--max-running-requests", "4",
                   "--request-log", str(logs / "b.log"), speed=SPEED) as b, \
         start_sim("--enable-metrics", "--model-path", model_dir, "--request-log", str(logs / "c.log"),
                   speed=SPEED) as c:
        with start_gateway("--worker-urls", a.url, b.url, "--policy", "round_robin", workers=2) as gw:
            yield {"a": a, "b": b, "c": c, "gw": gw, "logs": logs}

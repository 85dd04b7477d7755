"""What a client can observe of an SGLang-like server, as plain data, so that the simulator and the
real server can be compared field by field (tests/e2e/test_sim_external.py, benchmarks/real_probe.py).

probe(url) sends: a streamed and a non-streamed /generate, GET /health, /v1/loads, /server_info,
/metrics, and three bad requests (malformed JSON body, a body without text/input_ids, an unknown
path). It returns keys, types and status codes: never values that depend on timing.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

GEN = {"input_ids": list(range(1, 40)), "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}


def shape(v: Any) -> Any:
    """The JSON shape of a value: dict -> {key: shape}, list -> [shape of first], scalar -> type name."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    return type(v).__name__


def stream_events(text: str) -> list:
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def probe(url: str) -> dict:
    res: dict = {}
    with httpx.Client(base_url=url, timeout=120) as c:
        r = c.post("/generate", json=dict(GEN, stream=True))
        events = stream_events(r.text)
        res["stream_status"] = r.status_code
        res["stream_content_type"] = r.headers.get("content-type", "").split(";")[0]
        res["stream_last"] = events[-1] if events else None
        chunks = [e for e in events if isinstance(e, dict)]
        res["stream_top_keys"] = sorted(chunks[0]) if chunks else None
        res["stream_first_meta_keys"] = list(chunks[0]["meta_info"]) if chunks else None
        res["stream_final_meta_keys"] = list(chunks[-1]["meta_info"]) if chunks else None
        res["stream_final_finish_reason"] = chunks[-1]["meta_info"].get("finish_reason") if chunks else None
        # cumulative output_ids (not incremental) unless --incremental-streaming-output
        res["stream_output_ids_cumulative"] = (len(chunks[-1].get("output_ids", [])) == 8) if chunks else None
        res["stream_chunks_with_tokens"] = sum(1 for e in chunks if e["meta_info"].get("completion_tokens"))
        r = c.post("/generate", json=GEN)
        res["plain_status"] = r.status_code
        body = r.json()
        res["plain_top_keys"] = sorted(body)
        res["plain_meta_keys"] = list(body["meta_info"])
        res["health"] = c.get("/health").status_code
        res["health_generate"] = c.get("/health_generate").status_code
        loads = c.get("/v1/loads")
        res["loads_status"] = loads.status_code
        res["loads_shape"] = shape(loads.json()) if loads.status_code == 200 else loads.text[:100]
    # SGLang closes the connection after a 500 (its /v1/loads with --enable-metrics): new client.
    with httpx.Client(base_url=url, timeout=120) as c:
        info = c.get("/server_info").json()
        res["server_info_keys"] = sorted(info)
        res["internal_state_keys"] = sorted(info["internal_states"][0])
        m = c.get("/metrics")
        res["metrics_status"] = m.status_code
        res["metrics_text"] = m.text if m.status_code == 200 else None
        for name, kw in (("malformed", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}),
                         ("no_input", {"json": {"sampling_params": {"max_new_tokens": 4}}}),
                         ("bad_param", {"json": {"text": "t1 t2", "sampling_params": {"max_new_tokens": -5}}})):
            with httpx.Client(base_url=url, timeout=120) as c1:
                r = c1.post("/generate", **kw)
            try:
                b: Any = shape(r.json())
            except ValueError:
                b = r.text[:200]
            res[f"error_{name}"] = (r.status_code, b)
        r = c.get("/no/such/path")
        res["error_404"] = (r.status_code, r.text[:200])
    return res

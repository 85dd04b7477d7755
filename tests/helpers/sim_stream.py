"""What the simulator's streaming tests share across tiers: a streamed /generate and the times
its outputs arrived."""

from __future__ import annotations

import json

import httpx


def stream_generate(url: str, max_new: int, interval=None, ignore_eos: bool = True) -> list[dict]:
    sp = {"max_new_tokens": max_new, "ignore_eos": ignore_eos}
    if interval is not None:
        sp["stream_interval"] = interval
    with httpx.Client(base_url=url, timeout=120) as c:
        r = c.post("/generate", json={"input_ids": PROMPT, "stream": True, "sampling_params": sp})
    assert r.status_code == 200
    return [json.loads(l[6:]) for l in r.text.split("\n\n") if l.startswith("data: {")]


def outputs_at(objs: list[dict]) -> list[int]:
    return [o["meta_info"]["completion_tokens"] for o in objs]


PROMPT = list(range(1, 1025))

"""Talking to a simulated server: its /metrics page parsed into families, and a few requests sent."""

from __future__ import annotations

import re

import httpx


GEN = {"input_ids": list(range(1, 200)), "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}


def families(text: str) -> dict:
    """name -> (type, set of label keys over its samples, '_bucket' le values of the first series)."""
    out: dict = {}
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([^{\s]+)(?:\{(.*)\})? ", line)
        name, labels = m.group(1), m.group(2) or ""
        base = next((f for f in types if name == f or (name.startswith(f) and name[len(f):] in
                                                         ("_bucket", "_sum", "_count", "_total"))), name)
        keys = frozenset(k for k in re.findall(r'(\w+)="', labels) if k not in ("le", "pid"))
        t, ks = out.get(base, (types.get(base), set()))
        ks.add(keys)
        out[base] = (t, ks)
    return out


def load(url: str, n: int = 6, stream: bool = True) -> list:
    bodies = []
    with httpx.Client(base_url=url, timeout=30) as c:
        for i in range(n):
            body = dict(GEN, stream=stream)
            bodies.append(c.post("/generate", json=body).text)
    return bodies

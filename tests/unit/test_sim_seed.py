"""--seed reproduces a simulator run: two processes with the same seed but different
PYTHONHASHSEED (Python's str hash salt) give the same answers to the same requests."""

from __future__ import annotations


import httpx

from helpers.simproc import start_sim

PROMPTS = [list(range(1, 120)), list(range(500, 530)), [7] * 64]


def test_another_seed_other_answers(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "1")
    body = {"input_ids": PROMPTS[0], "rid": "r1", "sampling_params": {"max_new_tokens": 700}}
    got = []
    for seed in ("7", "8"):
        with start_sim("--seed", seed, "--startup-s", "0.5", speed=100) as sim:
            got.append(httpx.post(sim.url + "/generate", json=body, timeout=60).json())
    assert got[0]["output_ids"] != got[1]["output_ids"]

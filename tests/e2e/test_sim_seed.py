"""--seed reproduces a simulator run: two processes with the same seed but different
PYTHONHASHSEED (Python's str hash salt) give the same answers to the same requests."""

from __future__ import annotations

import re
import threading

import httpx

from helpers.simproc import start_sim

PROMPTS = [list(range(1, 120)), list(range(500, 530)), [7] * 64]
# The simulator's default release (0.5.23) names its per-request counts so.
SEEDED_KEYS = ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "spec_verify_ct",
               "spec_accept_length", "spec_num_correct_drafts", "spec_correct_drafts_histogram", "num_retractions")
COUNTERS = ("sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total",
            'sglang:realtime_tokens_total{engine_type="unified",mode="decode"')


def answers(url: str) -> dict:
    out = {}
    with httpx.Client(base_url=url, timeout=60) as c:
        # One after another, no rid: the sim makes up the ids, and (without ignore_eos) the
        # answer's length is the "model's" own choice.
        for i, ids in enumerate(PROMPTS):
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 700}}
            out[f"seq{i}"] = c.post("/generate", json=body).json()
        chat = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hello there"}],
                                                    "max_tokens": 700}).json()
        out["chat"] = {"id": chat["id"], "content": chat["choices"][0]["message"]["content"],
                       "finish_reason": chat["choices"][0]["finish_reason"], "usage": chat["usage"]}

        # Several at once with the caller's rids: batching depends on timing, the answers must not.
        def one(k: int) -> None:
            body = {"input_ids": PROMPTS[k % len(PROMPTS)], "rid": f"par-{k}",
                    "sampling_params": {"max_new_tokens": 400 + 50 * k}}
            out[f"par{k}"] = httpx.post(url + "/generate", json=body, timeout=60).json()

        ts = [threading.Thread(target=one, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out["server_info"] = c.get("/server_info").json()["internal_states"][0].get("avg_spec_accept_length")
        metrics = c.get("/metrics").text
    for name in COUNTERS:
        m = re.search(re.escape(name) + r"[^}]*\} (\S+)", metrics)
        out[name] = float(m.group(1))
    return out


def _seeded(a: dict) -> dict:
    out = {}
    for k, v in a.items():
        if isinstance(v, dict) and "meta_info" in v:
            out[k] = {"text": v["text"], "output_ids": v["output_ids"],
                      **{m: v["meta_info"].get(m) for m in SEEDED_KEYS}}
        else:
            out[k] = v
    return out


def test_same_seed_same_answers_whatever_the_hash_salt(monkeypatch):
    flags = ("--enable-metrics", "--seed", "7", "--decode-log-interval", "5", "--startup-s", "0.5")
    monkeypatch.setenv("PYTHONHASHSEED", "1")
    with start_sim(*flags, speed=100) as a:
        monkeypatch.setenv("PYTHONHASHSEED", "2")
        with start_sim(*flags, speed=100) as b:
            ra, rb = _seeded(answers(a.url)), _seeded(answers(b.url))
    for k in ra:
        assert ra[k] == rb[k], k
    # The seed decides things: answers end by EOS at different lengths, speculation varies.
    lengths = {ra[f"seq{i}"]["completion_tokens"] for i in range(len(PROMPTS))}
    assert len(lengths) > 1 and all(n < 700 for n in lengths)
    assert all(ra[f"seq{i}"]["finish_reason"]["type"] == "stop" for i in range(len(PROMPTS)))
    assert len({tuple(ra[f"par{k}"]["spec_correct_drafts_histogram"]) for k in range(4)}) > 1
    assert [ra[f"par{k}"]["id"] for k in range(4)] == [f"par-{k}" for k in range(4)]

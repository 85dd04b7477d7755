"""The simulator's radix (prefix) cache, over HTTP: shared prefixes hit, hits skip prefill (TTFT),
the cache lives in the KV pool and is evicted least-recently-used, /flush_cache empties it, and it
is reported as SGLang reports it (meta_info cached_tokens, sglang:cached_tokens_total,
realtime_tokens_total{mode="prefill_cache"}, evicted_tokens_total, the Prefill batch log line)."""

from __future__ import annotations

import json
import random
import re
import threading

import httpx

from helpers.simproc import start_sim
from specmon.servers.sim.radix import RadixCache

SHARED = list(range(1000, 7000))            # a 6,000-token shared prefix (a system prompt, a document)


def gen(c: httpx.Client, ids, max_new: int = 16, **extra) -> dict:
    body = {"input_ids": list(ids), "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True}, **extra}
    r = c.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]


def ttft(m: dict) -> float:
    """Server-side TTFT in simulated seconds, from SGLang's own stamps (--enable-metrics)."""
    return m["response_sent_to_client_ts"] - m["request_received_ts"]


def metric(text: str, name: str, **labels) -> float:
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^([^{\s]+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total, found = total + float(m.group(3)), True
    return total if found else 0.0


def test_shared_prefixes_hit_flush_empties_disjoint_misses():
    with start_sim("--profile", "fp8-nospec", "--enable-metrics", "--enable-cache-report", speed=50) as sim, \
            httpx.Client(base_url=sim.url, timeout=60) as c:
        cold = gen(c, SHARED + list(range(1, 51)))
        warm = gen(c, SHARED + list(range(51, 101)))       # same 6,000 leading ids, another question
        again = gen(c, SHARED + list(range(1, 51)))        # the very same prompt
        other = gen(c, range(20000, 26050))                # shares nothing with the above
        m = c.get("/metrics").text
        assert cold["cached_tokens"] == 0 and cold["cached_tokens_details"] is None
        assert warm["cached_tokens"] == 6000 and warm["cached_tokens_details"] == {"device": 6000, "host": 0}
        assert again["cached_tokens"] == 6049        # all but the last prompt token (it gives the logits)
        assert other["cached_tokens"] == 0
        # Cached tokens skip the prefill: the hit's TTFT is a small fraction of the miss's.
        assert ttft(warm) < 0.2 * ttft(cold) and ttft(again) < 0.2 * ttft(other), (ttft(cold), ttft(warm))
        print(f"\nTTFT miss {ttft(cold) * 1000:.1f} ms, hit of 6000/6050 tokens {ttft(warm) * 1000:.1f} ms (sim)")
        # SGLang's counters: the tokenizer side at finish, the scheduler side per prefill batch.
        assert metric(m, "sglang:cached_tokens_total", cache_source="device") == 6000 + 6049
        assert metric(m, "sglang:realtime_tokens_total", mode="prefill_cache") == 6000 + 6049
        assert metric(m, "sglang:prompt_tokens_total") == 7 + 4 * 6050    # + the warm-up request
        assert re.search(r"Prefill batch, #new-seq: 1, #new-token: 50, #cached-token: 6000, ", sim.log_text())
        # An idle server holds nothing: the cache's slots are free (evictable), not "used".
        loads = c.get("/v1/loads").json()["loads"][0]
        assert loads["num_used_tokens"] == 0 and loads["num_running_reqs"] == 0

        assert c.post("/flush_cache").status_code == 200
        assert gen(c, SHARED + list(range(1, 51)))["cached_tokens"] == 0
        assert gen(c, SHARED + list(range(1, 51)))["cached_tokens"] == 6049

        # Text prompts: the leading text is shared as tokens; unrelated texts share the BOS only,
        # as every prompt does on a real server (its sample: one BOS token hit per 1,024).
        doc = "The quick brown fox jumps over the lazy dog. " * 40          # 1,800 characters
        t1 = c.post("/generate", json={"text": doc + "Question one?", "sampling_params": {"max_new_tokens": 4}}).json()
        t2 = c.post("/generate", json={"text": doc + "Another question?", "sampling_params": {"max_new_tokens": 4}}).json()
        t3 = c.post("/generate", json={"text": "Nothing alike here.", "sampling_params": {"max_new_tokens": 4}}).json()
        assert t2["meta_info"]["cached_tokens"] == 1 + 1800 // 4 and t3["meta_info"]["cached_tokens"] == 1
        assert t1["meta_info"]["cached_tokens"] <= 1

        # OpenAI usage carries the hit with --enable-cache-report (null when there is none).
        assert c.post("/flush_cache").status_code == 200
        chat = {"messages": [{"role": "system", "content": doc}, {"role": "user", "content": "hi"}], "max_tokens": 4}
        u1 = c.post("/v1/chat/completions", json=chat).json()["usage"]
        u2 = c.post("/v1/chat/completions", json=chat).json()["usage"]
        assert u1["prompt_tokens_details"] is None
        assert u2["prompt_tokens_details"] == {"cached_tokens": u2["prompt_tokens"] - 1}


def test_a_running_requests_prompt_is_matched_and_eagle_keys_by_pairs():
    """SGLang inserts a prompt into the tree right after its prefill: a request that arrives while
    the first one still decodes hits it. With EAGLE the tree is keyed by token pairs (one fewer)."""
    with start_sim("--profile", "fp8-mtp", "--enable-metrics", speed=20) as sim, \
            httpx.Client(base_url=sim.url, timeout=60) as c:
        first_chunk = threading.Event()
        done = {}

        def long_one():
            body = {"input_ids": SHARED + [1, 2, 3], "stream": True,
                    "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}
            with httpx.stream("POST", sim.url + "/generate", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        first_chunk.set()
                        done["last"] = json.loads(line[6:])["meta_info"]

        t = threading.Thread(target=long_one)
        t.start()
        assert first_chunk.wait(60)
        during = gen(c, SHARED + [9, 9, 9], max_new=4)
        still_running = c.get("/v1/loads").json()["loads"][0]["num_running_reqs"]
        t.join()
        assert still_running == 1 and done["last"]["completion_tokens"] == 3000
        assert during["cached_tokens"] == 6000 - 1          # 5,999 pairs of the 6,000 shared ids
        same = gen(c, SHARED + [9, 9, 9], max_new=4)
        assert same["cached_tokens"] == 6003 - 2             # prompt_len - 1 tokens -> that many - 1 pairs


def test_lru_eviction_when_running_requests_need_the_pool():
    """A 6,000-token pool: three 2,000-token prompts (+9 output tokens each) cannot all stay
    cached; the least recently used goes first, and SGLang's eviction counter says how much."""
    a, b, c_ = (list(range(k, k + 2000)) for k in (10000, 20000, 30000))
    with start_sim("--profile", "fp8-nospec", "--enable-metrics", "--max-total-tokens", "6000", speed=50) as sim, \
            httpx.Client(base_url=sim.url, timeout=60) as c:
        assert [gen(c, p, max_new=10)["cached_tokens"] for p in (a, b)] == [0, 0]
        assert "sglang:evicted_tokens_total" not in c.get("/metrics").text    # nothing evicted yet
        assert gen(c, c_, max_new=10)["cached_tokens"] == 0   # its KV needs room: `a` (oldest) goes
        assert gen(c, b, max_new=10)["cached_tokens"] == 1999  # still cached; now the most recent
        assert gen(c, a, max_new=10)["cached_tokens"] == 0     # was evicted; evicts `c_` (now the LRU)
        assert gen(c, c_, max_new=10)["cached_tokens"] == 0
        m = c.get("/metrics").text
        evicted = metric(m, "sglang:evicted_tokens_total", cache_type="RadixCache")
        assert evicted >= 3 * 2000, evicted
        assert metric(m, "sglang:eviction_duration_seconds_count", cache_type="RadixCache") >= 3
        assert c.get("/v1/loads").json()["loads"][0]["num_used_tokens"] == 0


def test_disable_radix_cache_flag():
    with start_sim("--profile", "fp8-nospec", "--disable-radix-cache", speed=50) as sim, \
            httpx.Client(base_url=sim.url, timeout=60) as c:
        assert [gen(c, SHARED)["cached_tokens"] for _ in range(2)] == [0, 0]
        assert c.get("/server_info").json()["disable_radix_cache"] is True


def test_radix_tree_matches_like_a_list_of_sequences():
    """The tree against brute force: longest common prefix with any inserted sequence, and its
    size is the number of distinct prefixes; locked nodes survive eviction, unlocked ones all go."""
    rng = random.Random(5)
    for _ in range(200):
        tree, seqs = RadixCache(), []
        for _ in range(rng.randint(1, 10)):
            base = rng.choice(seqs) if seqs and rng.random() < 0.6 else ()
            s = tuple(base[:rng.randint(0, len(base))]) + tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 8)))
            q = tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 10)))
            want = max((next((i for i, (x, y) in enumerate(zip(p, q)) if x != y), min(len(p), len(q)))
                        for p in seqs), default=0)
            assert tree.match(q)[0] == want
            tree.insert(s)
            seqs.append(s)
            assert tree.total_size == len({p[:i] for p in seqs for i in range(1, len(p) + 1)})
        held = tree.insert(seqs[0])
        tree.lock(held)
        tree.evict(10 ** 9)
        assert tree.evictable_size == 0 and tree.protected_size == len(seqs[0])
        assert tree.match(seqs[0])[0] == len(seqs[0])
        tree.unlock(held)
        assert tree.evict(10 ** 9) == len(seqs[0]) and tree.total_size == 0

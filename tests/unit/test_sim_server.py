"""The simulator as a real process on 127.0.0.1: formats, metrics families, auth, faults, physics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from helpers.simproc import REPO, start_sim
from helpers.simclient import GEN, families, load

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sglang-metrics-sample.prom"  # made by SGLang's own code


def test_metrics_families_match_sglang_sample():
    # The sample is 0.5.10.post1's page (0.5.23's: tests/unit/test_sim_matches_sglang_versions.py).
    with start_sim("--enable-metrics", "--decode-log-interval", "5", "--sglang-version", "0.5.10",
                   speed=100) as sim:
        load(sim.url, 4)
        httpx.get(sim.url + "/v1/models")
        text = httpx.get(sim.url + "/metrics").text
    ours, ref = families(text), families(SAMPLE.read_text())
    assert set(ref) - set(ours) == set(), f"missing families: {sorted(set(ref) - set(ours))}"
    assert set(ours) - set(ref) == set(), f"extra families: {sorted(set(ours) - set(ref))}"
    for name, (t, keys) in ref.items():
        assert ours[name][0] == t, f"{name}: type {ours[name][0]} != {t}"
        assert ours[name][1] == keys, f"{name}: label keys {ours[name][1]} != {keys}"
    assert "_created" not in text
    assert re.search(r'sglang:num_retracted_reqs\{[^}]*pid="\d+"', text)


def test_metrics_content_negotiation_and_404_without_flag():
    with start_sim("--enable-metrics", speed=100) as sim:
        om = httpx.get(sim.url + "/metrics", headers={
            "Accept": "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5,text/plain;version=0.0.4;q=0.4"})
        assert "escaping=underscores" in om.headers["content-type"]
        assert "\nsglang_num_running_reqs{" in om.text and om.text.rstrip().endswith("# EOF")
        plain = httpx.get(sim.url + "/metrics")
        assert plain.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "\nsglang:num_running_reqs{" in plain.text
    with start_sim(speed=100) as sim:
        assert httpx.get(sim.url + "/metrics").status_code == 404


def test_generate_stream_and_meta_info():
    with start_sim("--enable-metrics", speed=100) as sim:
        chunks = [l[6:] for l in load(sim.url, 1)[0].split("\n\n") if l.startswith("data: ")]
        assert chunks[-1] == "[DONE]"
        objs = [json.loads(c) for c in chunks[:-1]]
        counts = [o["meta_info"]["completion_tokens"] for o in objs]
        assert counts == sorted(counts) and counts[-1] == 40
        assert any(b - a > 1 for a, b in zip(counts, counts[1:])), "speculation should add several tokens per chunk"
        last = objs[-1]["meta_info"]
        assert last["finish_reason"] == {"type": "length", "length": 40}
        for k in ("prompt_tokens", "cached_tokens", "e2e_latency", "spec_verify_ct", "spec_accept_length",
                  "request_received_ts", "decode_throughput"):
            assert k in last, k
        assert last["prompt_tokens"] == 199
        assert len(objs[-1]["output_ids"]) == 40
        assert objs[0]["meta_info"]["finish_reason"] is None and "e2e_latency" not in objs[0]["meta_info"]
        info = httpx.get(sim.url + "/server_info").json()
        assert info["sim_speed"] == 100.0 and info["speculative_algorithm"] == "EAGLE"
        assert info["internal_states"][0]["memory_usage"]["token_capacity"] == info["max_total_num_tokens"] == 175000


def test_openai_streams_with_usage():
    with start_sim(speed=100) as sim, httpx.Client(base_url=sim.url, timeout=30) as c:
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
                                                 "stream": True, "stream_options": {"include_usage": True}})
        ev = [l[6:] for l in r.text.split("\n\n") if l.startswith("data: ")]
        assert ev[-1] == "[DONE]"
        objs = [json.loads(e) for e in ev[:-1]]
        assert objs[0]["choices"][0]["delta"]["role"] == "assistant"
        assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] == 12
        assert objs[-2]["choices"][0]["finish_reason"] == "length"
        r = c.post("/v1/completions", json={"prompt": "hello", "max_tokens": 5, "stream": True})
        objs = [json.loads(l[6:]) for l in r.text.split("\n\n") if l.startswith("data: {")]
        assert objs[-1]["choices"][0]["finish_reason"] == "length"
        assert "".join(o["choices"][0]["text"] for o in objs)


def test_api_key_and_bad_bodies():
    with start_sim("--api-key", "k123", "--enable-metrics", speed=100) as sim, \
            httpx.Client(base_url=sim.url, timeout=30) as c:
        r = c.post("/generate", json=GEN)
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200
        h = {"Authorization": "bearer k123"}
        assert c.post("/generate", json=GEN, headers=h).status_code == 200
        bad = c.post("/generate", content=b"not json", headers={**h, "content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["object"] == "error" and bad.json()["type"] == "Bad Request"
        empty = c.post("/generate", json={}, headers=h)
        assert empty.status_code == 400 and empty.json() == {
            "error": {"message": "Either text, input_ids or input_embeds should be provided."}}
        assert c.get("/nope", headers=h).json() == {"detail": "Not Found"}


def test_unknown_profile_and_port_in_use():
    p = subprocess.run([sys.executable, "-m", "specmon", "sim", "--profile", "nope"], capture_output=True,
                       text=True, cwd=REPO)
    assert p.returncode == 2 and "fp8-mtp" in p.stderr and "nvfp4-mtp" in p.stderr
    with start_sim(speed=100) as sim:
        p = subprocess.run([sys.executable, "-m", "specmon", "sim", "--port", str(sim.port)], capture_output=True,
                           text=True, cwd=REPO, timeout=30)
        assert p.returncode == 3 and str(sim.port) in p.stderr and len(p.stderr.strip().splitlines()) == 1
    out = subprocess.run([sys.executable, "-m", "specmon", "sim", "--list-profiles"], capture_output=True,
                         text=True, cwd=REPO).stdout
    for name in ("fp8-mtp", "nvfp4-mtp", "fp8-dflash", "nvfp4-dspark", "fp8-nospec", "h200-fp8-mtp"):
        assert name in out


def test_log_lines_and_request_log(tmp_path):
    rl = tmp_path / "req.log"
    with start_sim("--decode-log-interval", "4", "--request-log", str(rl), speed=100) as sim:
        load(sim.url, 2)
        httpx.get(sim.url + "/server_info")
        log = sim.log_text()
    for needle in ("Load weight begin", "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 175000",
                   "Capture cuda graph end",
                   "max_total_num_tokens=175000", "Uvicorn running on", "The server is fired up and ready to roll!"):
        assert needle in log, needle
    assert re.search(r"^\[[\d-]+ [\d:]+\] Prefill batch, #new-seq: \d+, #new-token: \d+, #cached-token: \d+, "
                     r"token usage: [\d.]+, #running-req: \d+, #queue-req: \d+, #pending-token: \d+, cuda graph: False, "
                     r"input throughput \(token/s\): [\d.]+$", log, re.M)
    assert re.search(r"^\[[\d-]+ [\d:]+\] Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, "
                     r"accept len: [\d.]+, accept rate: [\d.]+, cuda graph: True, gen throughput \(token/s\): [\d.]+, "
                     r"#queue-req: \d+$", log, re.M)
    lines = rl.read_text().splitlines()
    assert "POST /generate" in lines and "GET /server_info" in lines and "GET /health" in lines


def test_tokens_never_reach_the_client_before_their_stamp(tmp_path):
    """At speed 1 the simulator's stamps are wall time: a token may not arrive before the pass
    that produced it ended (it once flushed a pass's tokens before sleeping to its end, and a
    client read TTFT ~10 % short). The wire log brackets what went to the socket."""
    wl = tmp_path / "wire.jsonl"
    with start_sim("--enable-metrics", "--wire-log", str(wl), "--profile", "fp8-mtp", "--startup-s", "0.5", speed=1) as sim:
        sent_at = {}
        with httpx.Client(base_url=sim.url, timeout=60) as c:
            for i in range(3):
                body = {"input_ids": list(range(1, 2001)), "stream": True, "rid": f"w{i}",
                        "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}
                t_sent, t_first, first, final = time.time(), None, None, None
                sent_at[f"w{i}"] = t_sent
                with c.stream("POST", "/generate", json=body) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            t_first = t_first or time.time()
                            final = json.loads(line[6:])["meta_info"]
                            first = first or final
                # SGLang's first chunk holds the first token alone and the stamp of its sending,
                # even when the next speculative pass was computed before the stream read it
                assert first["completion_tokens"] == 1 and "response_sent_to_client_ts" in first
                m = final
                assert t_first >= m["response_sent_to_client_ts"] - 0.002  # no token before its pass ended
                assert m["response_sent_to_client_ts"] - m["request_received_ts"] > 0.005  # a 2000-token prefill
    rows = {w["rid"]: w for w in map(json.loads, wl.read_text().splitlines())}
    assert set(rows) == {"w0", "w1", "w2"}
    for w in rows.values():
        assert w["status"] == 200 and w["bodies"] >= 3  # first token, ..., [DONE]
        assert w["t_in"] < w["t_first_body"] <= w["t_last_token_body"] <= w["t_last_body"]
        # (one clock, the host's: the simulator's own stamps follow its scheduler's clock, which
        # a busy host can hold back a little)
        assert sent_at[w["rid"]] <= w["t_in"]


def test_text_prompts_counted_with_the_models_tokenizer(tmp_path):
    """SGLang tokenizes text with the model's tokenizer: with --model-path a folder holding a
    tokenizer.json the simulator counts as it does; without one it estimates (~4 chars a token)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<unk>": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(["alpha", "beta", "gamma", "delta"])}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    (tmp_path / "model").mkdir()
    tok.save(str(tmp_path / "model" / "tokenizer.json"))
    text = " ".join(["alpha", "beta", "gamma", "delta"] * 25)  # 100 words + BOS; 574 characters
    body = {"text": text, "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}}
    with start_sim("--model-path", str(tmp_path / "model"), speed=100) as sim:
        exact = httpx.post(sim.url + "/generate", json=body, timeout=30).json()["meta_info"]["prompt_tokens"]
    with start_sim(speed=100) as sim:
        guessed = httpx.post(sim.url + "/generate", json=body, timeout=30).json()["meta_info"]["prompt_tokens"]
    assert exact == 101 == len(tokenizers.Tokenizer.from_file(str(tmp_path / "model" / "tokenizer.json")).encode(text).ids)
    assert guessed == (len(text) + 3) // 4 + 1 == 145

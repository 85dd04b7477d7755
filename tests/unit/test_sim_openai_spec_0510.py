"""The simulator's 0.5.10 mode treats `return_spec_tokens_details` as 0.5.10.post1 does: its
OpenAI request models have no such field and ignore unknown ones (pydantic's default), so the
request is answered, without the details, never refused."""

import json

import httpx

from helpers.simproc import start_sim
from specmon.sources.spec_counts import openai_spec_details


def test_0510_answers_a_request_asking_for_spec_details_without_them():
    with start_sim("--profile", "fp8-mtp", "--sglang-version", "0.5.10", speed=50) as sim:
        body = {"model": "m", "prompt": "hello there", "max_tokens": 8, "return_spec_tokens_details": True}
        whole = httpx.post(sim.url + "/v1/completions", json=body, timeout=30)
        assert whole.status_code == 200 and whole.json()["choices"][0]["text"]
        assert openai_spec_details(whole.json()) is None
        chat = httpx.post(sim.url + "/v1/chat/completions", timeout=30,
                          json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                                "stream": True, "return_spec_tokens_details": True})
        assert chat.status_code == 200
        events = [json.loads(x[6:]) for x in chat.text.splitlines() if x.startswith("data: ") and x != "data: [DONE]"]
        assert events and all(openai_spec_details(e) is None for e in events)
        # the native endpoint still carries 0.5.10's own counts in meta_info, unasked
        meta = httpx.post(sim.url + "/generate", timeout=30,
                          json={"text": "hello", "sampling_params": {"max_new_tokens": 8}}).json()["meta_info"]
        assert meta.get("spec_accept_token_num") is not None and "spec_num_correct_drafts" not in meta

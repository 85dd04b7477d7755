"""Response bodies in SGLang's shapes: /generate meta_info and chunks, OpenAI completion/chat chunks.

Streams are built per request incrementally (ids and text are appended, never re-rendered) so a
1024-token stream costs O(tokens) work plus one string copy per chunk.
"""

from __future__ import annotations

import json
import time
from typing import Optional

from specmon.servers.sim.engine import EOS_TOKEN_ID, SimRequest

dumps = json.dumps


class StreamState:
    """Cumulative output of one request, rendered to JSON fragments."""

    def __init__(self, r: SimRequest):
        self.r = r
        self.n = 0
        self.ids_json = ""        # "1,2,3"
        self.text = ""

    def advance(self, n: int) -> str:
        """Up to n tokens in all; returns the text of just the new ones. Only the new tokens are
        rendered (a chunk per decode step: re-rendering the whole output each time cost O(n))."""
        if n <= self.n:
            return ""
        r = self.r
        new_ids = r.ids_between(self.n, n)
        piece = r.text_of(new_ids)
        self.text += piece
        s = ",".join(map(str, new_ids))
        self.ids_json = f"{self.ids_json},{s}" if self.ids_json else s
        self.n = n
        return piece


def finish_reason(r: SimRequest) -> Optional[dict]:
    if not r.finished or r.t_finished is None:
        return None
    if r.stop_by_eos and r.output_len >= r.target_len:
        return {"type": "stop", "matched": EOS_TOKEN_ID}
    return {"type": "length", "length": r.output_len}


def spec_fields(r: SimRequest, n: int, spec_draft_tokens: int, sglang_version: str = "0.5.10") -> dict:
    """A finished request's own speculative counts, under the names its SGLang release uses
    (0.5.23: spec_num_correct_drafts / spec_num_proposed_drafts / spec_correct_drafts_histogram;
    0.5.10: spec_accept_token_num / spec_draft_token_num / spec_accept_histogram). Proposed drafts
    are verify steps x (draft tokens - 1), as SGLang counts them; the histogram's index is the
    drafts a step accepted, from the engine's acceptance model (engine.py)."""
    m: dict = {}
    total = r.verify_ct * (spec_draft_tokens - 1)
    if r.verify_ct <= 0 or total <= 0:
        return m
    new = not sglang_version.startswith("0.5.10")
    m["spec_accept_rate"] = r.accepted_drafts / total
    m["spec_accept_length"] = n / r.verify_ct
    if new:
        m["spec_num_correct_drafts"] = r.accepted_drafts
        m["spec_num_proposed_drafts"] = total
    else:
        m["spec_accept_token_num"] = r.accepted_drafts
        m["spec_draft_token_num"] = total
    m["spec_verify_ct"] = r.verify_ct
    if r.accept_hist:
        m["spec_correct_drafts_histogram" if new else "spec_accept_histogram"] = list(r.accept_hist)
    return m


def spec_tokens_details(r: SimRequest, n: int, spec_draft_tokens: int) -> Optional[dict]:
    """The OpenAI endpoints' `sglext.spec_tokens_details` (0.5.23, with
    return_spec_tokens_details): every field of SGLang's SpecTokensDetails, 0 / [] where unknown."""
    f = spec_fields(r, n, spec_draft_tokens, "0.5.23")
    if not f:
        return None
    return {"spec_accept_rate": f["spec_accept_rate"], "spec_accept_length": f["spec_accept_length"],
            "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": f["spec_num_correct_drafts"],
            "spec_num_proposed_drafts": f["spec_num_proposed_drafts"], "spec_verify_ct": f["spec_verify_ct"],
            "spec_correct_drafts_histogram": f.get("spec_correct_drafts_histogram", []),
            "spec_cap_lens_histogram": []}


def sglext_chunk(rid: str, created: int, model: str, obj: str, details: dict) -> str:
    """The stream's response-level sglext event (0.5.23 sends it after the last choice chunk,
    before the usage chunk)."""
    return dumps({"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": None,
                  "sglext": {"routed_experts": None, "cached_tokens_details": None, "spec_tokens_details": details,
                             "input_ids": None, "output_ids": None}}, separators=(",", ":"))


def meta_info(r: SimRequest, *, n: int, final: bool, clock, enable_metrics: bool, spec_draft_tokens: int,
              speculative: bool, t_now: float, sglang_version: str = "0.5.10") -> dict:
    m = {
        "id": r.rid,
        "finish_reason": finish_reason(r) if final else None,
        "prompt_tokens": r.prompt_len,
        "weight_version": "default",
    }
    new = not sglang_version.startswith("0.5.10")
    if new:
        m["num_retractions"] = r.retractions
    else:
        m["total_retractions"] = r.retractions
    if enable_metrics and new:
        # 0.5.23 carries the scheduler's stamps through: a measured queue time (admission to
        # forward entry) and the forward-entry / prefill-finished stamps once they exist.
        m["storage_prefetch_wait"] = 0.0
        m["storage_staging_wait"] = 0.0
        if r.t_forward_entry is not None:
            m["forward_entry_time"] = clock.epoch(r.t_forward_entry)
        if r.t_prefill_done is not None:
            m["prefill_finished_time"] = clock.epoch(r.t_prefill_done)
        if r.t_forward_entry is not None:
            m["queue_time"] = max(0.0, r.t_forward_entry - r.t_queued)
    elif enable_metrics:
        # As a real SGLang 0.5.10.post1 sends them: the scheduler's stamps are lost on the way
        # through the detokenizer (its time-stats object pickles to {} on the second hop), so
        # there is no forward_entry_time / prefill_finished_time, queue_time is 0.0 whatever the
        # wait, and the two prefill latencies are null. The real queue time is in the
        # sglang:queue_time_seconds histogram only (checked against the real server in
        # tests/real/test_sim_external.py).
        m["queue_time"] = 0.0
        m["prefill_waiting_latency"] = None
        m["prefill_launch_latency"] = None
    m["reasoning_tokens"] = 0
    m["completion_tokens"] = n
    m["cached_tokens"] = r.cached_tokens
    if new and final:  # 0.5.23: on the final answer only
        m["weight_versions"] = [{"version": "default", "start": 0, "end": n}]
    m["cached_tokens_details"] = {"device": r.cached_tokens, "host": 0} if r.cached_tokens else None
    m["dp_rank"] = getattr(r, "dp_rank", None)  # set by the DP ranks (dp.py), else None as SGLang
    # Real SGLang stamps the first streamed chunk (and a non-streamed answer) with
    # response_sent_to_client_ts with or without --enable-metrics.
    if (n <= 1 and not final) or (final and not enable_metrics and not getattr(r, "stream", True)):
        m["response_sent_to_client_ts"] = clock.epoch(r.t_first_token if r.t_first_token is not None else t_now)
    if final:
        t_fin = r.t_finished if r.t_finished is not None else t_now
        m["e2e_latency"] = t_fin - r.t_created
        if speculative:
            m.update(spec_fields(r, n, spec_draft_tokens, sglang_version))
        if enable_metrics:
            m["request_received_ts"] = clock.epoch(r.t_created)
            if new and r.t_first_token is not None:
                m["first_token_latency"] = r.t_first_token - r.t_created
            m["api_server_dispatch_finish_ts"] = clock.epoch(r.t_created + 0.0003)
            if r.t_first_token is not None:
                m["response_sent_to_client_ts"] = clock.epoch(r.t_first_token)
            m["request_finished_ts"] = clock.epoch(t_fin)
            if r.t_forward_entry is not None and not new:  # gone in 0.5.23
                m["inference_time"] = t_fin - r.t_forward_entry
            if r.t_first_token is not None and t_fin > r.t_first_token and n > 0:
                m["decode_throughput"] = n / (t_fin - r.t_first_token)
    return m


def generate_chunk(st: StreamState, meta: dict) -> str:
    return generate_chunk_raw(st, dumps(meta))


def generate_chunk_raw(st: StreamState, meta_json: str) -> str:
    return '{"text":' + dumps(st.text) + ',"output_ids":[' + st.ids_json + '],"meta_info":' + meta_json + "}"


_MARK = 987654321987  # a completion_tokens no request reaches: where a template splits


class MiddleMeta:
    """meta_info of a stream's middle chunks (neither the first nor the last) as JSON: only
    completion_tokens moves between them (and total_retractions, rarely), so the rest is rendered
    once per request instead of once per decode step."""

    def __init__(self, render):
        self.render = render        # n -> the meta_info dict of a middle chunk with n tokens
        self.key = None
        self.parts: list = []

    def json(self, r: SimRequest, n: int) -> str:
        # Split at every place n appears (completion_tokens, and 0.5.23's weight_versions end).
        if self.key != r.retractions:
            self.parts = dumps(self.render(_MARK)).split(str(_MARK))
            self.key = r.retractions
        return str(n).join(self.parts)


def oai_finish_reason(r: SimRequest) -> Optional[str]:
    fr = finish_reason(r)
    if fr is None:
        return None
    return "stop" if fr["type"] == "stop" else "length"


def completion_chunk(rid: str, created: int, model: str, text: str, finish: Optional[str],
                     matched=None) -> str:
    return dumps({"id": rid, "object": "text_completion", "created": created, "model": model,
                  "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                               "matched_stop": matched}],
                  "usage": None}, separators=(",", ":"))


def chat_chunk(rid: str, created: int, model: str, *, role=None, content=None, finish=None, matched=None) -> str:
    return dumps({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                  "choices": [{"index": 0, "delta": {"role": role, "content": content, "reasoning_content": None,
                                                     "tool_calls": None},
                               "logprobs": None, "finish_reason": finish, "matched_stop": matched}],
                  "usage": None}, separators=(",", ":"))


def usage(r: SimRequest, enable_cache_report: bool = False) -> dict:
    # SGLang fills prompt_tokens_details only with --enable-cache-report and a hit (else null).
    u = {"prompt_tokens": r.prompt_len, "total_tokens": r.prompt_len + r.output_len,
         "completion_tokens": r.output_len,
         "prompt_tokens_details": {"cached_tokens": r.cached_tokens}
         if enable_cache_report and r.cached_tokens > 0 else None,
         "reasoning_tokens": 0}
    return u


def usage_chunk(rid: str, created: int, model: str, obj: str, r: SimRequest,
                enable_cache_report: bool = False) -> str:
    u = usage(r, enable_cache_report)
    if u["prompt_tokens_details"] is None:
        del u["prompt_tokens_details"]  # the streamed usage chunk leaves the key out
    return dumps({"id": rid, "object": obj, "created": created, "model": model, "choices": [],
                  "usage": u}, separators=(",", ":"))


def now_epoch() -> int:
    return int(time.time())

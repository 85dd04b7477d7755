"""SGLang's OpenAI-compatible /v1/completions and /v1/chat/completions: the prompt from the body,
the answer in one piece, and its stream of chunks."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from specmon.servers.sim import formats
from specmon.servers.sim.engine import SimRequest
from specmon.servers.sim.http_errors import read_json, validation_error
from specmon.servers.sim.submission import make_request, wait_updates

if TYPE_CHECKING:
    from specmon.servers.sim.app import SimState


def oai_error(msg: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"object": "error", "message": msg, "type": "BadRequestError", "param": None,
                         "code": status}, status_code=status)


def oai_prompt(body: dict, chat: bool, path: str):
    where = "openai_v1_chat_completions" if chat else "openai_v1_completions"
    if chat:
        msgs = body.get("messages")
        if msgs is None:
            return None, validation_error([{"type": "missing", "loc": ("body", "messages"), "msg": "Field required",
                                            "input": body}], path, where)
        if not isinstance(msgs, list):
            return None, validation_error([{"type": "list_type", "loc": ("body", "messages"),
                                            "msg": "Input should be a valid list", "input": msgs}], path, where)
        if not msgs:
            return None, oai_error("Messages cannot be empty.")
        parts = []
        for m in msgs:
            if not isinstance(m, dict) or "role" not in m:
                return None, oai_error("Each message needs a role")
            c = m.get("content")
            if isinstance(c, list):
                c = " ".join(x.get("text", "") for x in c if isinstance(x, dict))
            parts.append(f"<|{m['role']}|>\n{c or ''}\n")
        return "".join(parts) + "<|assistant|>\n", None
    p = body.get("prompt")
    if p is None:
        return None, validation_error([{"type": "missing", "loc": ("body", "prompt"), "msg": "Field required",
                                        "input": body}], path, where)
    if isinstance(p, list) and p and isinstance(p[0], int):
        return p, None
    if isinstance(p, list):
        if len(p) != 1 or not isinstance(p[0], str):
            return None, oai_error("The simulator serves one prompt per request.")
        p = p[0]
    if not isinstance(p, str):
        return None, oai_error("prompt must be a string or a list of token ids")
    return p, None


class OpenAIApi:
    """POST /v1/completions and /v1/chat/completions for one simulated server."""

    def __init__(self, st: SimState):
        self.st = st
        self.sched = st.sched

    def spec_details(self, r: SimRequest, body: dict) -> Optional[dict]:
        # 0.5.23's per-request speculative counts on the OpenAI endpoints, only when asked for
        # (0.5.10 has no such field and ignores it).
        st = self.st
        if not (st.spec and getattr(st, "new_shapes", True) and body.get("return_spec_tokens_details") is True):
            return None
        return formats.spec_tokens_details(r, r.output_len, st.num_draft_tokens)

    async def completions(self, request: Request):
        return await self.openai(request, chat=False)

    async def chat_completions(self, request: Request):
        return await self.openai(request, chat=True)

    async def openai(self, request: Request, chat: bool):
        st = self.st
        body, err = await read_json(request, "openai_v1_chat_completions" if chat else "openai_v1_completions")
        if err:
            return err
        mt = body.get("max_tokens")
        if isinstance(mt, int) and mt <= 0:
            return validation_error([{"type": "value_error", "loc": ("body", "max_tokens"),
                                      "msg": "Value error, max_tokens must be positive", "input": mt,
                                      "ctx": {"error": "ValueError('max_tokens must be positive')"}}],
                                    request.url.path, "openai_v1_chat_completions" if chat else "openai_v1_completions")
        prompt, err = oai_prompt(body, chat, request.url.path)
        if err:
            return err
        model = body.get("model") or "default"
        mt = body.get("max_completion_tokens") if chat else None
        mt = mt if mt is not None else body.get("max_tokens")
        if mt is None and not chat:
            mt = 16
        sp = {"max_new_tokens": 1 if st.disagg_mode == "prefill" else mt,
              "ignore_eos": body.get("ignore_eos", False), "temperature": body.get("temperature")}
        problem = await st.bootstrap_problem(body)
        if problem:
            return oai_error(problem, 500)
        n_tok = len(prompt) if isinstance(prompt, list) else st.tokens.count(prompt)
        if n_tok + 1 > st.ph.max_total_tokens:
            return oai_error(f"The input ({n_tok} tokens) is longer than the model's context length "
                             f"({st.ph.max_total_tokens} tokens).")
        r = make_request(st, prompt, sp, None)
        r.stream = bool(body.get("stream"))
        rid = r.rid  # SGLang answers with meta_info.id as the chunk id, unprefixed
        created = int(time.time())
        st.submit(r, body)
        if body.get("stream"):
            so = body.get("stream_options") or {}
            include_usage = bool(so.get("include_usage"))
            return StreamingResponse(self.oai_stream(r, rid, created, model, chat, include_usage, body),
                                     media_type="text/event-stream")
        n = 0
        try:
            async for n, fin, err_msg in wait_updates(r):
                if err_msg:
                    return oai_error(err_msg)
        except asyncio.CancelledError:
            self.sched.abort(r)
            raise
        ss = formats.StreamState(r)
        ss.advance(n)
        fr = formats.oai_finish_reason(r)
        matched = 2 if fr == "stop" else None
        u = formats.usage(r, st.enable_cache_report)
        if chat:
            out = {"id": rid, "object": "chat.completion", "created": created, "model": model,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": ss.text,
                                                        "reasoning_content": None, "tool_calls": None},
                                "logprobs": None, "finish_reason": fr, "matched_stop": matched}],
                   "usage": u, "metadata": {"weight_version": "default"}}
        else:
            out = {"id": rid, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"index": 0, "text": ss.text, "logprobs": None, "finish_reason": fr,
                                "matched_stop": matched}],
                   "usage": u, "metadata": {"weight_version": "default"}}
        details = self.spec_details(r, body)
        if details is not None:
            out["sglext"] = {"routed_experts": None, "cached_tokens_details": None, "spec_tokens_details": details,
                             "input_ids": None, "output_ids": None}
        return JSONResponse(out)

    async def oai_stream(self, r: SimRequest, rid: str, created: int, model: str, chat: bool, include_usage: bool,
                         body: dict):
        ss = formats.StreamState(r)
        done = False
        first = True
        try:
            async for n, fin, err_msg in wait_updates(r):
                if err_msg:
                    yield "data: " + json.dumps({"error": {"message": err_msg}}) + "\n\n"
                    break
                piece = ss.advance(n)
                fr = formats.oai_finish_reason(r) if fin else None
                matched = 2 if fr == "stop" else None
                if chat:
                    # SGLang's chat stream sends its role-only event (content "") when the first
                    # output arrives from the scheduler, right before that output's content event,
                    # not at admission: a client's first byte comes with the first token. Both go
                    # out in one write here (docs/field-notes.md, SGLang notes 6.2).
                    out = ("data: " + formats.chat_chunk(rid, created, model, role="assistant", content="")
                           + "\n\n") if first else ""
                    first = False
                    if piece:
                        out += "data: " + formats.chat_chunk(rid, created, model, content=piece) + "\n\n"
                    if fin:
                        out += "data: " + formats.chat_chunk(rid, created, model, finish=fr, matched=matched) + "\n\n"
                    if out:
                        yield out
                elif piece or fin:
                    # SGLang puts finish_reason on the completion chunk that carries the last tokens.
                    yield "data: " + formats.completion_chunk(rid, created, model, piece, fr, matched) + "\n\n"
                if fin:
                    obj = "chat.completion.chunk" if chat else "text_completion"
                    details = self.spec_details(r, body)
                    if details is not None:
                        yield "data: " + formats.sglext_chunk(rid, created, model, obj, details) + "\n\n"
                    if include_usage:
                        yield "data: " + formats.usage_chunk(rid, created, model, obj, r,
                                                             self.st.enable_cache_report) + "\n\n"
            yield "data: [DONE]\n\n"
            done = True
        finally:
            if not done:
                self.sched.abort(r)

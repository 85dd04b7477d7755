"""SGLang's native /generate: the body's checks, the answer in one piece, and its stream."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from specmon.servers.sim import formats
from specmon.servers.sim.engine import SimRequest
from specmon.servers.sim.http_errors import error, read_json, validation_error
from specmon.servers.sim.submission import make_request, wait_updates

if TYPE_CHECKING:
    from specmon.servers.sim.app import SimState


class NativeApi:
    """POST/PUT /generate for one simulated server."""

    def __init__(self, st: SimState):
        self.st = st
        self.sched = st.sched

    def check_prompt(self, body: dict):
        st = self.st
        text, ids = body.get("text"), body.get("input_ids")
        if text is not None and not isinstance(text, (str, list)):
            return None, validation_error([
                {"type": "string_type", "loc": ("body", "text", "str"), "msg": "Input should be a valid string", "input": text},
                {"type": "list_type", "loc": ("body", "text", "list[str]"), "msg": "Input should be a valid list", "input": text}],
                "/generate", "generate_request")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(x, (int, list)) and not isinstance(x, bool) for x in ids)):
            bad = ids if not isinstance(ids, list) else next(x for x in ids if not isinstance(x, (int, list)) or isinstance(x, bool))
            return None, validation_error([
                {"type": "list_type", "loc": ("body", "input_ids", "list[list[int]]", 0), "msg": "Input should be a valid list", "input": bad},
                {"type": "int_parsing", "loc": ("body", "input_ids", "list[int]", 0),
                 "msg": "Input should be a valid integer, unable to parse string as an integer", "input": bad}],
                "/generate", "generate_request")
        if text is None and ids is None and body.get("input_embeds") is None:
            return None, error("Either text, input_ids or input_embeds should be provided.", 400)
        prompt = ids if ids is not None else text
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (list, str)):
            return None, error("The simulator serves one prompt per request (batched input is not simulated).", 400)
        n = len(prompt) if isinstance(prompt, list) else st.tokens.count(prompt)
        if n + 1 > st.ph.max_total_tokens or n >= st.ph.p.model.context_len:
            lim = min(st.ph.max_total_tokens, st.ph.p.model.context_len)
            return None, error(f"The input ({n} tokens) is longer than the model's context length ({lim} tokens).", 400)
        return prompt, None

    async def generate(self, request: Request):
        st = self.st
        body, err = await read_json(request, "generate_request")
        if err:
            return err
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, (dict, list)):
            return validation_error([
                {"type": "list_type", "loc": ("body", "sampling_params", "list[dict[any,any]]"),
                 "msg": "Input should be a valid list", "input": sp},
                {"type": "dict_type", "loc": ("body", "sampling_params", "dict[any,any]"),
                 "msg": "Input should be a valid dictionary", "input": sp}], "/generate", "generate_request")
        if isinstance(sp, list):
            sp = sp[0] if sp and isinstance(sp[0], dict) else {}
        prompt, err = self.check_prompt(body)
        if err:
            return err
        try:
            mnt = sp.get("max_new_tokens")
            if mnt is not None and int(mnt) < 0:
                return error("max_new_tokens must be at least 0, got %s." % mnt, 400)
            temp = sp.get("temperature")
            if temp is not None and float(temp) < 0:
                return error("temperature must be non-negative, got %s." % temp, 400)
        except (TypeError, ValueError) as e:
            return error(f"Invalid sampling_params: {e}", 400)
        problem = await st.bootstrap_problem(body)
        if problem:
            return error(problem, 500)
        if st.disagg_mode == "prefill":
            sp = dict(sp, max_new_tokens=1)  # a PD prefill computes the prompt and its first token
        r = make_request(st, prompt, sp, body.get("rid") if isinstance(body.get("rid"), str) else None,
                         bool(body.get("log_metrics", True)))
        stream = bool(body.get("stream", False))
        r.stream = stream
        st.submit(r, body)
        if stream:
            return StreamingResponse(self.gen_stream(r), media_type="text/event-stream")
        try:
            n = 0
            async for n, fin, err_msg in wait_updates(r):
                if err_msg:
                    return error(err_msg, 400)
        except asyncio.CancelledError:
            self.sched.abort(r)
            raise
        ss = formats.StreamState(r)
        ss.advance(n)
        meta = self.meta_for(r, n, True)
        return Response(formats.generate_chunk(ss, meta), media_type="application/json")

    def meta_for(self, r: SimRequest, n: int, final: bool) -> dict:
        st = self.st
        return formats.meta_info(r, n=n, final=final, clock=st.clock, enable_metrics=st.enable_metrics,
                                 spec_draft_tokens=st.num_draft_tokens, speculative=st.spec,
                                 t_now=st.clock.now(), sglang_version=st.sglang_version)

    async def gen_stream(self, r: SimRequest):
        ss = formats.StreamState(r)
        middle = formats.MiddleMeta(lambda n: self.meta_for(r, n, False))
        done = False
        try:
            async for n, fin, err_msg in wait_updates(r):
                if err_msg:
                    yield "data: " + json.dumps({"error": {"message": err_msg}}) + "\n\n"
                    break
                ss.advance(n)
                if fin or n <= 1:
                    yield "data: " + formats.generate_chunk(ss, self.meta_for(r, n, fin)) + "\n\n"
                else:
                    yield "data: " + formats.generate_chunk_raw(ss, middle.json(r, n)) + "\n\n"
            yield "data: [DONE]\n\n"
            done = True
        finally:
            if not done:
                self.sched.abort(r)

"""The HTTP side: SGLang's endpoints on Starlette, with pure-ASGI middlewares for the API key,
the HTTP metrics, the request log and the 503 fault (BaseHTTPMiddleware would buffer streams)."""

from __future__ import annotations

import asyncio
import hmac
import json
import random
import re
import time
import uuid
from datetime import datetime, timezone
from typing import Optional

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from specmon.servers.sim import formats
from specmon.servers.sim.dp import DPScheduler, routed_rank
from specmon.servers.sim.engine import Scheduler, SimRequest
from specmon.servers.sim.server_args_defaults import INTERNAL_STATE_EXTRA
from specmon.servers.sim.server_args_defaults_0523 import EMBEDDING_INFO_0523, TOP_LEVEL_ONLY_0523
from specmon.servers.sim.stablehash import stable_hash
from specmon.servers.sim.tokens import TokenCounter

VERSION = "0.5.10.post1"  # --sglang-version 0.5.10; SimState.version_string says which one a server speaks

DEFAULT_MAX_NEW_TOKENS = 128
_WIRE_ID = re.compile(rb'"id":\s*"([^"]+)"')  # the rid in a /generate chunk's meta_info


class SimState:
    """Everything the handlers share."""

    def __init__(self, *, cfg, physics, scheduler: Scheduler, clock, metrics, server_args: dict,
                 logger):
        self.cfg = cfg
        self.ph = physics
        self.sched = scheduler
        self.clock = clock
        self.metrics = metrics
        self.server_args = server_args
        self.log = logger
        self.tokens = TokenCounter(cfg.model_path)  # text prompts: the model's tokenizer or an estimate
        self.ready = False
        self.in_flight = 0
        self.served_model_name = cfg.served_model_name
        a = cfg.args
        self.enable_metrics = bool(a.enable_metrics)
        self.enable_cache_report = bool(a.enable_cache_report)
        self.api_key: Optional[str] = a.api_key
        self.spec = bool(physics.p.drafter.algorithm)
        self.num_draft_tokens = physics.num_draft_tokens
        self.started_epoch = time.time()
        self.seed = int(a.seed)
        self.rid_rng = random.Random(stable_hash(self.seed, "rid"))
        self.disagg_mode = a.disaggregation_mode  # "null" | "prefill" | "decode"
        from specmon.servers.sim.config import SGLANG_VERSION_STRINGS
        self.sglang_version = getattr(a, "sglang_version", "0.5.23")  # "0.5.23" | "0.5.10"
        self.new_shapes = self.sglang_version != "0.5.10"
        self.version_string = SGLANG_VERSION_STRINGS[self.sglang_version]
        # Filled by main.py once the simulated startup ran (0.5.23's startup_time and gauges).
        self.startup_time: dict = {}
        self.startup_available_gb = 0.0
        self.graph_gb_by_phase: dict = {}
        self.rank_metrics: list = []
        self._bootstrap_seen: dict = {}  # decode: (host, port) -> None (answered) or the failure

    @property
    def ranks(self) -> list:
        """The DP ranks' schedulers (one for a server without --dp-size)."""
        return self.sched.ranks if isinstance(self.sched, DPScheduler) else [self.sched]

    async def bootstrap_problem(self, body: dict) -> Optional[str]:
        """A PD decode asks the prefill's bootstrap server for its parallel layout before it can
        take a request's KV (SGLang's KV receiver: GET /route with every rank -1). None: it
        answered (once per prefill), else why it did not."""
        host, port = body.get("bootstrap_host"), body.get("bootstrap_port")
        if self.disagg_mode != "decode" or host is None:
            return None
        if isinstance(host, list):
            host = host[0] if host else None
        if isinstance(port, list):
            port = port[0] if port else None
        if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
            return f"no usable bootstrap address (bootstrap_host={host!r}, bootstrap_port={port!r})"
        key = (host, port)
        if self._bootstrap_seen.get(key, "unasked") is None:
            return None
        import httpx

        url = f"http://{host}:{port}/route"
        try:
            async with httpx.AsyncClient(timeout=5.0, trust_env=False) as c:
                r = await c.get(url, params={"prefill_dp_rank": -1, "prefill_cp_rank": -1,
                                             "target_tp_rank": -1, "target_pp_rank": -1})
            problem = None if r.status_code == 200 else f"{url} answered HTTP {r.status_code}"
        except httpx.HTTPError as e:
            problem = f"{url}: {type(e).__name__} {e}".strip()
        self._bootstrap_seen[key] = problem
        return None if problem is None else f"Failed to get prefill server info from the bootstrap server: {problem}"

    def submit(self, r: SimRequest, body: dict) -> None:
        if isinstance(self.sched, DPScheduler):
            self.sched.submit(r, routed_rank(body))
        else:
            self.sched.submit(r)


def _err(message: str, status: int = 400) -> JSONResponse:
    # SGLang's shape for a request its tokenizer manager rejects (ValueError -> 400).
    return JSONResponse({"error": {"message": message}}, status_code=status)


def _validation_err(errors: list, path: str, where: str) -> JSONResponse:
    # SGLang's shape for a body FastAPI/pydantic rejects: openai-style error with the pydantic list.
    n = len(errors)
    lines = "\n".join(f"  {e!r}" for e in errors)
    msg = (f"{n} validation error{'s' if n != 1 else ''}:\n{lines}\n\n  File \"sglang/srt/entrypoints/http_server.py\", "
           f"in {where}\n    POST {path} {errors!r}")
    return JSONResponse({"object": "error", "message": msg, "type": "Bad Request", "param": None, "code": 400},
                        status_code=400)


def build_app(st: SimState) -> Starlette:
    sched = st.sched

    # -- request construction -------------------------------------------------------------------
    def make_request(prompt, sampling: dict, rid: Optional[str], log_metrics: bool = True) -> SimRequest:
        # The prompt as the tokens the prefix cache matches: input_ids as sent, text as the
        # model's tokenizer splits it (or the simulator's stand-in tokens, see tokens.py).
        key = tuple(prompt) if isinstance(prompt, list) else st.tokens.key(prompt)
        prompt_len = len(key)
        max_new = sampling.get("max_new_tokens")
        max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else int(max_new)
        ignore_eos = bool(sampling.get("ignore_eos", False))
        si = sampling.get("stream_interval")  # SGLang's per-request override of --stream-interval
        si = si if isinstance(si, int) and not isinstance(si, bool) and si >= 1 else None
        # A uuid4-shaped id as SGLang makes, drawn from --seed: the n-th request of a run gets the
        # same id, hence the same answer, every time.
        rid = rid or uuid.UUID(int=st.rid_rng.getrandbits(128), version=4).hex
        seed = stable_hash(st.seed, "request", rid)
        if ignore_eos or max_new <= 1:
            target, by_eos = max(1, max_new), False
        else:
            # The "model" ends its answer after a length drawn per request (from --seed and the rid).
            natural = 16 + stable_hash(st.seed, "eos", rid) % 600
            target, by_eos = (natural, True) if natural < max_new else (max_new, False)
        return SimRequest(rid=rid, prompt_len=prompt_len, max_new_tokens=max(1, max_new), target_len=target,
                          stop_by_eos=by_eos, t_created=st.clock.now(), log_metrics=log_metrics,
                          prefix_key=key, seed=seed, stream_interval=si, ignore_eos=ignore_eos)

    async def wait_updates(r: SimRequest):
        """Yields (tokens_so_far, finished, error) each time the scheduler flushes this request."""
        n = 0
        while True:
            await r.event.wait()
            r.event.clear()
            ups, r.pending = r.pending, []
            fin, err = False, None
            for u in ups:
                n += u.new_tokens
                fin = fin or u.finished
                err = err or u.error
            if ups:
                yield n, fin, err
            if fin or err:
                return

    def check_prompt(body: dict):
        text, ids = body.get("text"), body.get("input_ids")
        if text is not None and not isinstance(text, (str, list)):
            return None, _validation_err([
                {"type": "string_type", "loc": ("body", "text", "str"), "msg": "Input should be a valid string", "input": text},
                {"type": "list_type", "loc": ("body", "text", "list[str]"), "msg": "Input should be a valid list", "input": text}],
                "/generate", "generate_request")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(x, (int, list)) and not isinstance(x, bool) for x in ids)):
            bad = ids if not isinstance(ids, list) else next(x for x in ids if not isinstance(x, (int, list)) or isinstance(x, bool))
            return None, _validation_err([
                {"type": "list_type", "loc": ("body", "input_ids", "list[list[int]]", 0), "msg": "Input should be a valid list", "input": bad},
                {"type": "int_parsing", "loc": ("body", "input_ids", "list[int]", 0),
                 "msg": "Input should be a valid integer, unable to parse string as an integer", "input": bad}],
                "/generate", "generate_request")
        if text is None and ids is None and body.get("input_embeds") is None:
            return None, _err("Either text, input_ids or input_embeds should be provided.", 400)
        prompt = ids if ids is not None else text
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (list, str)):
            return None, _err("The simulator serves one prompt per request (batched input is not simulated).", 400)
        n = len(prompt) if isinstance(prompt, list) else st.tokens.count(prompt)
        if n + 1 > st.ph.max_total_tokens or n >= st.ph.p.model.context_len:
            lim = min(st.ph.max_total_tokens, st.ph.p.model.context_len)
            return None, _err(f"The input ({n} tokens) is longer than the model's context length ({lim} tokens).", 400)
        return prompt, None

    async def read_json(request: Request, where: str):
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return None, _validation_err([{"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error",
                                           "input": {}, "ctx": {"error": getattr(e, "msg", str(e))}}],
                                         request.url.path, where)
        if not isinstance(body, dict):
            return None, _validation_err([{"type": "dataclass_type", "loc": ("body",),
                                           "msg": "Input should be a dictionary or an instance of GenerateReqInput",
                                           "input": body, "ctx": {"class_name": "GenerateReqInput"}}],
                                         request.url.path, where)
        return body, None

    # -- /generate ------------------------------------------------------------------------------
    async def generate(request: Request):
        body, err = await read_json(request, "generate_request")
        if err:
            return err
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, (dict, list)):
            return _validation_err([
                {"type": "list_type", "loc": ("body", "sampling_params", "list[dict[any,any]]"),
                 "msg": "Input should be a valid list", "input": sp},
                {"type": "dict_type", "loc": ("body", "sampling_params", "dict[any,any]"),
                 "msg": "Input should be a valid dictionary", "input": sp}], "/generate", "generate_request")
        if isinstance(sp, list):
            sp = sp[0] if sp and isinstance(sp[0], dict) else {}
        prompt, err = check_prompt(body)
        if err:
            return err
        try:
            mnt = sp.get("max_new_tokens")
            if mnt is not None and int(mnt) < 0:
                return _err("max_new_tokens must be at least 0, got %s." % mnt, 400)
            temp = sp.get("temperature")
            if temp is not None and float(temp) < 0:
                return _err("temperature must be non-negative, got %s." % temp, 400)
        except (TypeError, ValueError) as e:
            return _err(f"Invalid sampling_params: {e}", 400)
        problem = await st.bootstrap_problem(body)
        if problem:
            return _err(problem, 500)
        if st.disagg_mode == "prefill":
            sp = dict(sp, max_new_tokens=1)  # a PD prefill computes the prompt and its first token
        r = make_request(prompt, sp, body.get("rid") if isinstance(body.get("rid"), str) else None,
                         bool(body.get("log_metrics", True)))
        stream = bool(body.get("stream", False))
        r.stream = stream
        st.submit(r, body)
        if stream:
            return StreamingResponse(gen_stream(r), media_type="text/event-stream")
        try:
            n = 0
            async for n, fin, error in wait_updates(r):
                if error:
                    return _err(error, 400)
        except asyncio.CancelledError:
            sched.abort(r)
            raise
        ss = formats.StreamState(r)
        ss.advance(n)
        meta = meta_for(r, n, True)
        return Response(formats.generate_chunk(ss, meta), media_type="application/json")

    def meta_for(r: SimRequest, n: int, final: bool) -> dict:
        return formats.meta_info(r, n=n, final=final, clock=st.clock, enable_metrics=st.enable_metrics,
                                 spec_draft_tokens=st.num_draft_tokens, speculative=st.spec,
                                 t_now=st.clock.now(), sglang_version=st.sglang_version)

    def spec_details(r: SimRequest, body: dict) -> Optional[dict]:
        # 0.5.23's per-request speculative counts on the OpenAI endpoints, only when asked for
        # (0.5.10 has no such field and ignores it).
        if not (st.spec and getattr(st, "new_shapes", True) and body.get("return_spec_tokens_details") is True):
            return None
        return formats.spec_tokens_details(r, r.output_len, st.num_draft_tokens)

    async def gen_stream(r: SimRequest):
        ss = formats.StreamState(r)
        middle = formats.MiddleMeta(lambda n: meta_for(r, n, False))
        done = False
        try:
            async for n, fin, error in wait_updates(r):
                if error:
                    yield "data: " + json.dumps({"error": {"message": error}}) + "\n\n"
                    break
                ss.advance(n)
                if fin or n <= 1:
                    yield "data: " + formats.generate_chunk(ss, meta_for(r, n, fin)) + "\n\n"
                else:
                    yield "data: " + formats.generate_chunk_raw(ss, middle.json(r, n)) + "\n\n"
            yield "data: [DONE]\n\n"
            done = True
        finally:
            if not done:
                sched.abort(r)

    # -- OpenAI ---------------------------------------------------------------------------------
    def _oai_prompt(body: dict, chat: bool, path: str):
        where = "openai_v1_chat_completions" if chat else "openai_v1_completions"
        if chat:
            msgs = body.get("messages")
            if msgs is None:
                return None, _validation_err([{"type": "missing", "loc": ("body", "messages"), "msg": "Field required",
                                               "input": body}], path, where)
            if not isinstance(msgs, list):
                return None, _validation_err([{"type": "list_type", "loc": ("body", "messages"),
                                               "msg": "Input should be a valid list", "input": msgs}], path, where)
            if not msgs:
                return None, _oai_err("Messages cannot be empty.")
            parts = []
            for m in msgs:
                if not isinstance(m, dict) or "role" not in m:
                    return None, _oai_err("Each message needs a role")
                c = m.get("content")
                if isinstance(c, list):
                    c = " ".join(x.get("text", "") for x in c if isinstance(x, dict))
                parts.append(f"<|{m['role']}|>\n{c or ''}\n")
            return "".join(parts) + "<|assistant|>\n", None
        p = body.get("prompt")
        if p is None:
            return None, _validation_err([{"type": "missing", "loc": ("body", "prompt"), "msg": "Field required",
                                           "input": body}], path, where)
        if isinstance(p, list) and p and isinstance(p[0], int):
            return p, None
        if isinstance(p, list):
            if len(p) != 1 or not isinstance(p[0], str):
                return None, _oai_err("The simulator serves one prompt per request.")
            p = p[0]
        if not isinstance(p, str):
            return None, _oai_err("prompt must be a string or a list of token ids")
        return p, None

    def _oai_err(msg: str, status: int = 400) -> JSONResponse:
        return JSONResponse({"object": "error", "message": msg, "type": "BadRequestError", "param": None,
                             "code": status}, status_code=status)

    async def openai(request: Request, chat: bool):
        body, err = await read_json(request, "openai_v1_chat_completions" if chat else "openai_v1_completions")
        if err:
            return err
        mt = body.get("max_tokens")
        if isinstance(mt, int) and mt <= 0:
            return _validation_err([{"type": "value_error", "loc": ("body", "max_tokens"),
                                     "msg": "Value error, max_tokens must be positive", "input": mt,
                                     "ctx": {"error": "ValueError('max_tokens must be positive')"}}],
                                   request.url.path, "openai_v1_chat_completions" if chat else "openai_v1_completions")
        prompt, err = _oai_prompt(body, chat, request.url.path)
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
            return _oai_err(problem, 500)
        n_tok = len(prompt) if isinstance(prompt, list) else st.tokens.count(prompt)
        if n_tok + 1 > st.ph.max_total_tokens:
            return _oai_err(f"The input ({n_tok} tokens) is longer than the model's context length "
                            f"({st.ph.max_total_tokens} tokens).")
        r = make_request(prompt, sp, None)
        r.stream = bool(body.get("stream"))
        rid = r.rid  # SGLang answers with meta_info.id as the chunk id, unprefixed
        created = int(time.time())
        st.submit(r, body)
        if body.get("stream"):
            so = body.get("stream_options") or {}
            include_usage = bool(so.get("include_usage"))
            return StreamingResponse(oai_stream(r, rid, created, model, chat, include_usage, body),
                                     media_type="text/event-stream")
        n = 0
        try:
            async for n, fin, error in wait_updates(r):
                if error:
                    return _oai_err(error)
        except asyncio.CancelledError:
            sched.abort(r)
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
        details = spec_details(r, body)
        if details is not None:
            out["sglext"] = {"routed_experts": None, "cached_tokens_details": None, "spec_tokens_details": details,
                             "input_ids": None, "output_ids": None}
        return JSONResponse(out)

    async def oai_stream(r: SimRequest, rid: str, created: int, model: str, chat: bool, include_usage: bool,
                         body: dict):
        ss = formats.StreamState(r)
        done = False
        first = True
        try:
            async for n, fin, error in wait_updates(r):
                if error:
                    yield "data: " + json.dumps({"error": {"message": error}}) + "\n\n"
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
                    details = spec_details(r, body)
                    if details is not None:
                        yield "data: " + formats.sglext_chunk(rid, created, model, obj, details) + "\n\n"
                    if include_usage:
                        yield "data: " + formats.usage_chunk(rid, created, model, obj, r,
                                                             st.enable_cache_report) + "\n\n"
            yield "data: [DONE]\n\n"
            done = True
        finally:
            if not done:
                sched.abort(r)

    async def completions(request: Request):
        return await openai(request, chat=False)

    async def chat_completions(request: Request):
        return await openai(request, chat=True)

    # -- info endpoints -------------------------------------------------------------------------
    async def health(request: Request):
        return Response(status_code=200 if st.ready else 503)

    def internal_state(s) -> dict:
        d = dict(st.server_args)
        if st.new_shapes:
            for k in TOP_LEVEL_ONLY_0523:  # 0.5.23's scheduler copy leaves these out
                d.pop(k, None)
            d["world_size"] = st.cfg.args.tp_size
            d["startup_time"] = st.startup_time
            graphs = [k for k in st.server_args.get("cuda_graph_config", {}).get("decode", {}).get("bs", [])]
            d["decode_cuda_graph_bs"] = graphs
            d["decode_cuda_graph_memory_gb"] = round(st.graph_gb_by_phase.get("decode", st.ph.graph_gb), 3)
        else:
            d.update(INTERNAL_STATE_EXTRA)
        d["last_gen_throughput"] = s.last_gen_throughput
        d["memory_usage"] = {"weight": round(st.ph.weight_bytes / 1e9 + st.ph.draft_weight_bytes / 1e9, 2),
                             "kvcache": round(st.ph.kv_cache_gb, 2), "token_capacity": st.ph.max_total_tokens,
                             "graph": st.ph.graph_gb}
        if st.new_shapes:  # 0.5.23: graph memory by phase, the startup free memory, the SWA pool (none)
            d["memory_usage"] = {"weight": d["memory_usage"]["weight"], "kvcache": d["memory_usage"]["kvcache"],
                                 "startup_available": round(st.startup_available_gb, 3),
                                 "token_capacity": st.ph.max_total_tokens, "token_capacity_swa": None,
                                 "graph": {k: round(v, 3) for k, v in st.graph_gb_by_phase.items()}}
        d["effective_max_running_requests_per_dp"] = s.max_running_requests
        acc = s.lifetime_accept_length
        if acc is not None and s.decode_steps >= s.decode_log_interval:
            d["avg_spec_accept_length"] = acc
        return d

    async def server_info(request: Request):
        info = dict(st.server_args)
        info.update({"status": "ready", "max_total_num_tokens": st.ph.max_total_tokens,
                     "max_req_input_len": min(st.ph.max_total_tokens - 1, st.ph.p.model.context_len) - 1,
                     "internal_states": [internal_state(s) for s in st.ranks], "version": st.version_string,
                     "sim_speed": st.clock.speed, "sim_profile": st.cfg.profile.name})
        if st.new_shapes:
            info["startup_time"] = st.startup_time
            info["launch_command"] = " ".join(getattr(st.cfg.args, "launch_argv", []))
        return JSONResponse(info)

    async def model_info(request: Request):
        if st.new_shapes:  # 0.5.23's keys, in its order
            sa = st.server_args
            return JSONResponse({
                "model_path": st.cfg.model_path, "served_model_name": st.served_model_name,
                "tokenizer_path": st.cfg.model_path, "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default", "load_format": sa.get("load_format", "auto"),
                "reasoning_parser": sa.get("reasoning_parser"), "tool_call_parser": sa.get("tool_call_parser"),
                "disaggregation_mode": st.disagg_mode, "has_image_understanding": False,
                "has_audio_understanding": False, "model_type": "qwen3",
                "architectures": [st.ph.p.model.architecture], "embedding": dict(EMBEDDING_INFO_0523)})
        return JSONResponse({"model_path": st.cfg.model_path, "tokenizer_path": st.cfg.model_path,
                             "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                             "has_image_understanding": False, "has_audio_understanding": False,
                             "model_type": "qwen3", "architectures": [st.ph.p.model.architecture]})

    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [{
            "id": st.served_model_name, "object": "model", "created": int(st.started_epoch), "owned_by": "sglang",
            "root": st.served_model_name, "parent": None, "max_model_len": st.ph.p.model.context_len}]})

    def loads_entry(include: set, sched, dp_rank: Optional[int]) -> dict:
        # One DP rank's scheduler, as SGLang reports it (dp_rank left out for a server without DP ranks).
        used = sched.num_used_tokens
        if st.new_shapes:
            return loads_entry_0523(include, sched, dp_rank or 0)
        e = {} if dp_rank is None else {"dp_rank": dp_rank}
        e.update({"num_running_reqs": len(sched.running), "num_waiting_reqs": len(sched.waiting),
                  "num_used_tokens": used, "max_total_num_tokens": sched.max_total_tokens,
                  "token_usage": round(sched.token_usage, 4),
                  "gen_throughput": round(sched.last_gen_throughput, 2) if st.enable_metrics else 0.0,
                  "cache_hit_rate": round(sched.last_cache_hit_rate, 4) if st.enable_metrics else 0.0,
                  "utilization": 0.0, "max_running_requests": sched.max_running_requests})
        if "memory" in include:
            e["memory"] = {"weight_gb": round(st.ph.weight_bytes / 1e9, 2), "kv_cache_gb": round(st.ph.kv_cache_gb, 2),
                           "graph_gb": st.ph.graph_gb, "token_capacity": st.ph.max_total_tokens}
        if "spec" in include and sched.lifetime_accept_length is not None \
                and sched.decode_steps >= sched.decode_log_interval:
            e["speculative"] = {"accept_length": sched.lifetime_accept_length,
                                "accept_rate": sched.last_spec_accept_rate if st.enable_metrics else 0.0}
        if "disagg" in include:
            e["disaggregation"] = {"mode": st.disagg_mode, "prefill_prealloc_queue_reqs": 0, "prefill_inflight_queue_reqs": 0,
                                   "decode_prealloc_queue_reqs": 0, "decode_transfer_queue_reqs": 0,
                                   "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0,
                                   "kv_transfer_latency_ms": 0.0}
        if "queues" in include:
            e["queues"] = {"waiting": len(sched.waiting), "grammar": 0, "paused": 0, "retracted": 0}
        e["num_total_reqs"] = len(sched.running) + len(sched.waiting)
        return e

    def loads_entry_0523(include: set, sched, dp_rank: int) -> dict:
        # 0.5.23: every rank says its dp_rank and stamp; token counts from the pool and the queue.
        used = sched.num_used_tokens
        pending = sched.pending_tokens
        run = sched.running
        e = {"timestamp": st.clock.epoch(st.clock.now()), "dp_rank": dp_rank,
             "num_running_reqs": len(run), "num_waiting_reqs": len(sched.waiting),
             "num_waiting_uncached_tokens": pending, "num_used_tokens": used,
             "num_total_tokens": used + pending, "num_active_tokens": used + pending,
             "num_prealloc_ready_tokens": 0, "max_total_num_tokens": sched.max_total_tokens,
             "max_running_requests": sched.max_running_requests, "token_usage": round(sched.token_usage, 4),
             "gen_throughput": round(sched.last_gen_throughput, 2) if st.enable_metrics else 0.0,
             "cache_hit_rate": round(sched.last_cache_hit_rate, 4) if st.enable_metrics else 0.0,
             "utilization": 0.0,
             "total_prefill_uncached_tokens": sched.total_prefill_uncached_tokens,
             "total_prefill_busy_us": int(sched.total_prefill_busy_s * 1e6),
             "decode_moments": list(sched.decode_moment_totals) if sched.decode_moment_totals[0] > 0 else None}
        if "memory" in include:
            e["memory"] = {"weight_gb": round(st.ph.weight_bytes / 1e9, 3), "kv_cache_gb": round(st.ph.kv_cache_gb, 3),
                           "graph_gb": st.ph.graph_gb, "token_capacity": st.ph.max_total_tokens}
        if "spec" in include and sched.lifetime_accept_length is not None \
                and sched.decode_steps >= sched.decode_log_interval:
            e["speculative"] = {"accept_length": sched.lifetime_accept_length,
                                "accept_rate": sched.last_spec_accept_rate if st.enable_metrics else 0.0}
        if "disagg" in include:
            e["disaggregation"] = {"mode": st.disagg_mode, "prefill_bootstrap_queue_reqs": 0,
                                   "prefill_inflight_queue_reqs": 0, "decode_prealloc_queue_reqs": 0,
                                   "decode_transfer_queue_reqs": 0, "decode_retracted_queue_reqs": 0,
                                   "kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0}
        if "queues" in include:
            e["queues"] = {"waiting": len(sched.waiting), "grammar": 0, "paused": 0, "retracted": 0,
                           "prealloc_ready": 0}
        return e

    async def v1_loads(request: Request):
        t0 = time.perf_counter()
        try:
            return await _v1_loads(request)
        finally:
            if st.enable_metrics and st.metrics is not None:
                st.metrics.observe_get_loads(time.perf_counter() - t0)

    async def _v1_loads(request: Request):
        inc = request.query_params.get("include", "all")
        include = {x.strip() for x in inc.split(",")}
        if "all" in include:
            include = {"core", "memory", "spec", "lora", "disagg", "queues"}
        multi = isinstance(sched, DPScheduler)
        entries = [loads_entry(include, s, k if multi else None) for k, s in enumerate(st.ranks)]
        want = request.query_params.get("dp_rank")
        if want is not None:
            try:
                k = int(want)
            except ValueError:
                return JSONResponse({"detail": [{"type": "int_parsing", "loc": ["query", "dp_rank"],
                                                 "msg": "Input should be a valid integer, unable to parse string "
                                                        "as an integer", "input": want}]}, status_code=422)
            entries = [e for e in entries if e.get("dp_rank") == k]
        if request.query_params.get("format") == "prometheus":
            lines = []
            for e in entries:
                rank = e.get("dp_rank")
                for k, v in e.items():
                    if k == "dp_rank":
                        continue
                    if isinstance(v, dict):
                        for k2, v2 in v.items():
                            if isinstance(v2, (int, float)) and not isinstance(v2, bool):
                                lines.append(f'sglang_{k}_{k2}{{dp_rank="{rank}"}} {v2}')
                    elif isinstance(v, (int, float)):
                        lines.append(f'sglang_{k}{{dp_rank="{rank}"}} {v}')
            return PlainTextResponse("\n".join(lines) + "\n")
        n = len(entries)
        if st.new_shapes:  # 0.5.23: no aggregate, no rank count; the accelerator instead
            return JSONResponse({"timestamp": datetime.now(timezone.utc).isoformat(), "version": st.version_string,
                                 "accelerator": st.ph.p.gpu.name,
                                 "num_accelerators": st.cfg.args.tp_size, "loads": entries})  # per DP rank, as SGLang counts
        return JSONResponse({
            "timestamp": datetime.now(timezone.utc).isoformat(), "version": st.version_string, "dp_rank_count": n,
            "loads": entries,
            "aggregate": {"total_running_reqs": sum(e["num_running_reqs"] for e in entries),
                          "total_waiting_reqs": sum(e["num_waiting_reqs"] for e in entries),
                          "total_reqs": sum(e["num_total_reqs"] for e in entries),
                          "avg_token_usage": round(sum(e["token_usage"] for e in entries) / n, 4) if n else 0.0,
                          "avg_throughput": round(sum(e["gen_throughput"] for e in entries) / n, 2) if n else 0.0,
                          "avg_utilization": 0.0}})

    async def get_load(request: Request):
        if st.new_shapes:  # gone in 0.5.23
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        st.log.warning("The /get_load endpoint is deprecated; use /v1/loads.")
        multi = isinstance(sched, DPScheduler)
        return JSONResponse([{"rid": None, "http_worker_ipc": None, "dp_rank": k if multi else None,
                              "num_reqs": len(s.running) + len(s.waiting),
                              "num_waiting_reqs": len(s.waiting),
                              "num_tokens": s.num_used_tokens + sum(r.prompt_len for r in s.waiting),
                              "ts_tic": time.perf_counter()} for k, s in enumerate(st.ranks)])

    async def flush_cache(request: Request):
        timeout = request.query_params.get("timeout")
        if timeout is not None:
            try:
                deadline = time.monotonic() + float(timeout)
            except ValueError:
                deadline = time.monotonic()
            while not sched.is_idle() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if not sched.is_idle():
            st.log.warning(f"Cache not flushed because there are pending requests. "
                           f"#queue-req: {len(sched.waiting)}, #running-req: {len(sched.running)}")
            return PlainTextResponse("Cache not flushed. Please check backend logs for more details. "
                                     "(When there are running or waiting requests, the operation will not be performed.)\n",
                                     status_code=400)
        sched.flush_prefix_cache()
        st.log.info("Cache flushed successfully!")
        return Response("Cache flushed.\nPlease check backend logs for more details. "
                                 "(When there are running or waiting requests, the operation will not be performed.)\n")

    async def set_internal_state(request: Request):
        sched.lifetime_verify = 0
        sched.lifetime_spec_tokens = 0
        return JSONResponse({"updated": True, "server_args": st.server_args})

    routes = [
        Route("/generate", generate, methods=["POST", "PUT"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/health_generate", health, methods=["GET"]),
        Route("/server_info", server_info, methods=["GET"]),
        Route("/get_server_info", server_info, methods=["GET"]),
        Route("/model_info", model_info, methods=["GET"]),
        Route("/get_model_info", model_info, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/loads", v1_loads, methods=["GET"]),
        Route("/get_load", get_load, methods=["GET"]),
        Route("/flush_cache", flush_cache, methods=["GET", "POST"]),
        Route("/set_internal_state", set_internal_state, methods=["POST", "PUT"]),
    ]
    # The simulator's own (SGLang has no such endpoint): the GPU it simulates (gpu.py).
    from specmon.servers.sim.gpu import make_route as simulated_gpu_route
    routes.append(simulated_gpu_route(st))
    if st.enable_metrics and st.metrics is not None:
        mount = Mount("/metrics", app=metrics_app(st))
        # As SGLang does: serve /metrics itself, not only /metrics/ (no redirect).
        mount.path_regex = re.compile("^/metrics(?P<path>.*)$")
        routes.append(mount)
    async def not_found(request, exc):
        detail = "Method Not Allowed" if exc.status_code == 405 else "Not Found"
        headers = getattr(exc, "headers", None)
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    return app


def metrics_app(st: SimState):
    import prometheus_client

    inner = prometheus_client.make_asgi_app(st.metrics.registry)
    fault = st.cfg.args.fault_metrics

    async def app(scope, receive, send):
        if fault == "absent":
            await PlainTextResponse("Not Found", status_code=404)(scope, receive, send)
            return
        if fault == "slow":
            await asyncio.sleep(5.0)
        if fault == "malformed":
            body = b"# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{engine_type=\"unified\" 12.0.0\n\x00garbage {{{\n"
            await Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")(scope, receive, send)
            return
        await inner(scope, receive, send)

    return app


ARRIVAL_KEY = "specmon.sim.t_arrival"


def arrival_stamping_protocol():
    """uvicorn's h11 protocol (the one it picks here anyway: httptools is not installed), which
    stamps each request with the wall time the event loop read its first bytes, in the scope
    under ARRIVAL_KEY. The app's own first stamp comes later: uvicorn makes a task per request
    and the loop runs it after whatever it was doing, at a level's first wave after C other
    requests' parsing and every stream's chunks (the wire log keeps both stamps)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ArrivalStampingH11(H11Protocol):
        _t_first: Optional[float] = None

        def data_received(self, data: bytes) -> None:
            t = time.time()
            # The bytes begin a request when the connection is between requests (h11 stays IDLE
            # until the whole head is parsed: a head split over reads keeps its first stamp).
            if self._t_first is None and self.conn.their_state is h11.IDLE:
                self._t_first = t
            before = self.scope
            super().data_received(data)
            if self.scope is not before and self.scope is not None:
                self.scope[ARRIVAL_KEY] = self._t_first if self._t_first is not None else t
                self._t_first = None

    return ArrivalStampingH11


def wrap_middlewares(app, st: SimState):
    """Outermost first: request log, HTTP metrics, API key, overload 503."""
    request_log = st.cfg.args.request_log
    api_key = st.api_key
    limit_503 = st.cfg.args.fault_503_above
    m = st.metrics if st.enable_metrics else None
    gen_paths = {"/generate", "/v1/completions", "/v1/chat/completions"}
    log_fh = open(request_log, "a", buffering=1) if request_log else None
    wire_fh = open(st.cfg.args.wire_log, "a", buffering=1) if st.cfg.args.wire_log else None
    from specmon.servers.sim.config import coalesce_steps
    coalesce = coalesce_steps(st.cfg.args.speed)  # decode steps one chunk may hold (engine._deliver)

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if log_fh is not None:
            log_fh.write(f"{method} {path}\n")
        if api_key and method != "OPTIONS" and not (path.startswith("/health") or path.startswith("/metrics")):
            auth = ""
            for k, v in scope.get("headers", []):
                if k == b"authorization":
                    auth = v.decode("latin-1")
                    break
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
                await _count(m, path, method, 401,
                             JSONResponse({"error": "Unauthorized"}, status_code=401), scope, receive, send)
                return
        if limit_503 is not None and path in gen_paths and st.in_flight >= limit_503:
            await _count(m, path, method, 503, JSONResponse(
                {"object": "error", "message": "The server is overloaded (simulated fault).",
                 "type": "ServiceUnavailableError", "param": None, "code": 503}, status_code=503),
                scope, receive, send)
            return
        is_gen = path in gen_paths
        if is_gen:
            st.in_flight += 1
        status = {"code": 500}
        # Wall-clock wire stamps (time.time(), the clock a client on this host reads): when the
        # event loop read the request's first bytes (t_arrival, arrival_stamping_protocol), when
        # it reached this app (t_in) and each moment a body chunk was handed to the socket.
        # Ground truth for a client's timing that leaves out the scheduler-to-socket path and the
        # body parse, which SGLang's own *_ts stamps do not cover.
        wire = {"t_arrival": scope.get(ARRIVAL_KEY), "t_in": time.time(), "first": None, "last": None,
                "last_token": None, "bodies": 0, "rid": None} \
            if (wire_fh is not None and is_gen) else None

        async def send_wrap(msg):
            if msg["type"] == "http.response.start":
                status["code"] = msg["status"]
            await send(msg)
            if wire is not None and msg["type"] == "http.response.body" and msg.get("body"):
                t = time.time()
                if wire["first"] is None:
                    wire["first"] = t
                    found = _WIRE_ID.search(msg["body"])
                    wire["rid"] = found.group(1).decode() if found else None
                wire["last"] = t
                if not msg["body"].startswith(b"data: [DONE]"):
                    wire["last_token"] = t
                wire["bodies"] += 1

        if m is not None:
            m.http_requests_total.labels(endpoint=path, method=method).inc()
            active = m.http_requests_active.labels(endpoint=path, method=method)
            active.inc()
        try:
            await app(scope, receive, send_wrap)
        finally:
            if is_gen:
                st.in_flight -= 1
            if wire is not None:
                wire_fh.write(json.dumps({"path": path, "status": status["code"], "rid": wire["rid"],
                                          "t_arrival": wire["t_arrival"],
                                          "t_in": wire["t_in"], "t_first_body": wire["first"],
                                          "t_last_token_body": wire["last_token"], "t_last_body": wire["last"],
                                          "bodies": wire["bodies"], "coalesce_steps": coalesce}) + "\n")
            if m is not None:
                active.dec()
                m.http_responses_total.labels(endpoint=path, method=method, status_code=str(status["code"])).inc()

    return asgi


async def _count(m, path, method, code, response, scope, receive, send):
    if m is not None:
        m.http_requests_total.labels(endpoint=path, method=method).inc()
        m.http_responses_total.labels(endpoint=path, method=method, status_code=str(code)).inc()
    await response(scope, receive, send)

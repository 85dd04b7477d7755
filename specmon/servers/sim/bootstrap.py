"""The bootstrap server of a PD prefill (`--disaggregation-mode prefill`), on
`--disaggregation-bootstrap-port` (SGLang's default 8998).

In SGLang the prefill's schedulers register their KV-transfer endpoints here (PUT /route) and a
decode asks it (GET /route, every rank -1) for the prefill's parallel layout before it takes a
request's KV; a gateway in PD mode hands each request the prefill's host and this port
(bootstrap_host, bootstrap_port) and a bootstrap_room. The simulator moves no KV: its schedulers
count as registered once the server is ready, and the decode simulator asks GET /route once per
prefill (app.SimState.bootstrap_problem) so a wrong port in the gateway shows as failed requests.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


def bootstrap_app(st) -> Starlette:
    ranks = len(st.ranks)

    def registered() -> int:
        return ranks if st.ready else 0

    async def health(request: Request):
        return PlainTextResponse("OK")

    async def route(request: Request):
        if request.method == "PUT":
            return PlainTextResponse("OK")
        if request.method != "GET":
            return Response("Method not allowed", status_code=405, media_type="application/json")
        q = request.query_params
        keys = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
        if not all(q.get(k) for k in keys):
            return PlainTextResponse("Missing inputs for bootstrap server.", status_code=400)
        if registered() < ranks:
            return PlainTextResponse(f"Prefill server not fully registered yet ({registered()} workers registered).",
                                     status_code=503)
        try:
            wanted = [int(q[k]) for k in keys]
        except ValueError:
            return PlainTextResponse("Missing inputs for bootstrap server.", status_code=400)
        if wanted == [-1, -1, -1, -1]:
            return JSONResponse({"attn_tp_size": 1, "attn_cp_size": 1, "dp_size": ranks, "pp_size": 1,
                                 "page_size": 1, "kv_cache_dtype": st.server_args.get("kv_cache_dtype"),
                                 "follow_bootstrap_room": True})
        dp, cp, tp, pp = wanted
        if not (0 <= dp < ranks and cp == 0 and tp == 0 and pp == 0):
            return PlainTextResponse(f"Bootstrap info not found for dp_rank={dp} cp_rank={cp} tp_rank={tp} "
                                     f"pp_rank={pp}", status_code=404)
        return JSONResponse({"rank_ip": st.server_args.get("host"), "rank_port": 0})

    async def register_dp_rank(request: Request):
        return PlainTextResponse("OK")

    async def query_dp_ranks(request: Request):
        return JSONResponse({})

    return Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/route", route, methods=["GET", "PUT", "POST", "DELETE", "PATCH"]),
        Route("/register_dp_rank", register_dp_rank, methods=["POST"]),
        Route("/query_dp_ranks", query_dp_ranks, methods=["POST"]),
    ])

"""Streaming client for SGLang's native /generate, timed the way the peers should be.

Per request it keeps the perf_counter stamps of: scheduled (when the ramp wanted to send),
sent, first byte (response headers), first token, every event that added tokens (with how many:
the delta of meta_info.completion_tokens, so a 4-token speculative chunk counts 4), and end.

Bytes are stamped as they arrive and parsed cheaply: each event is scanned for
`"completion_tokens":N` with a byte search, and only the final event (the one holding
e2e_latency / spec_verify_ct / queue_time) is decoded as JSON. SGLang sends cumulative text in
every event, so json.loads on each would cost O(n^2) in the output length.

Durations here are wall seconds; RequestOutcome.record() multiplies them by the arm's
time_scale (simulated seconds per wall second) when it builds the RequestRecord.
Errors (HTTP status, connection, timeout, mid-stream error events) are recorded on the
outcome, never raised: one failed request must not stop a ramp.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import httpx

from specmon.analysis.stats import percentile, spread_gaps
from specmon.load.workload import Prompt
from specmon.model import RequestRecord

_STALE_ERRORS = ("ReadError", "RemoteProtocolError", "WriteError", "ConnectError")
_CT_KEY = b'"completion_tokens":'
_PT_KEY = b'"prompt_tokens":'


def _int_after(buf: bytes, key: bytes) -> Optional[int]:
    i = buf.rfind(key)
    if i < 0:
        return None
    j = i + len(key)
    end = j
    n = len(buf)
    while end < n and buf[end] in b" ":
        end += 1
    start = end
    while end < n and 48 <= buf[end] <= 57:
        end += 1
    return int(buf[start:end]) if end > start else None


def trusted_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """meta_info without the fields the server did not really measure.

    SGLang 0.5.10 sends the scheduler's time stamps through the detokenizer, and the second hop
    drops them (its time-stats object pickles to {} there): the final meta_info then has no
    forward_entry_time and says queue_time 0.0, prefill_*_latency null, even for a request that
    waited seconds in the queue (seen on a real server: 0.0 for every request at 6 running + 6
    queued, while sglang:queue_time_seconds averaged ~10 s). A 0.0 that is not a measurement must
    not reach the CSVs: without forward_entry_time the queue time is dropped (unknown), and the
    level falls back to the server's queue_time_seconds histogram."""
    if "queue_time" in meta and "forward_entry_time" not in meta:
        meta = {k: v for k, v in meta.items() if k not in ("queue_time", "prefill_waiting_latency",
                                                           "prefill_launch_latency")}
    return meta


@dataclass
class RequestOutcome:
    """Raw timing of one request (perf_counter stamps) plus what the server said at the end."""

    request_id: str
    t_scheduled_wall: float
    t_scheduled: float  # perf_counter
    t_sent: Optional[float] = None
    t_sent_wall: Optional[float] = None
    t_first_byte: Optional[float] = None
    t_end: Optional[float] = None
    # (perf stamp, tokens added) for every event that added tokens, in order
    token_events: list[tuple[float, int]] = field(default_factory=list)
    completion_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None
    final_meta: Optional[dict[str, Any]] = None
    events: int = 0
    status: str = "ok"
    error: Optional[str] = None

    # -- derived, in wall seconds -------------------------------------------------------------
    def wall(self, perf_stamp: float) -> float:
        return self.t_sent_wall + (perf_stamp - self.t_sent)

    @property
    def ttft(self) -> Optional[float]:
        if not self.token_events or self.t_sent is None:
            return None
        return self.token_events[0][0] - self.t_sent

    @property
    def e2e(self) -> Optional[float]:
        if self.t_end is None or self.t_sent is None or self.status != "ok":
            return None
        return self.t_end - self.t_sent

    def server_times(self) -> Optional[tuple[float, float]]:
        """(TTFT, e2e) from the server's own stamps in the final meta_info (--enable-metrics):
        response_sent_to_client_ts (the first response) and request_finished_ts, each minus
        request_received_ts. None when the server did not send all three."""
        m = self.final_meta or {}
        rx, first, fin = (m.get(k) for k in ("request_received_ts", "response_sent_to_client_ts",
                                             "request_finished_ts"))
        if self.status != "ok" or not all(isinstance(v, (int, float)) for v in (rx, first, fin)):
            return None
        if not rx <= first <= fin:
            return None
        return first - rx, fin - rx

    def timed(self, scale: float) -> tuple[Optional[float], Optional[float], str]:
        """TTFT and e2e in the arm's seconds, and which clock measured them ("client"/"server").

        A real server (scale 1) is always timed by this client. A simulator run `scale` times
        faster than the clock is timed by its own stamps when it sends them: there, every wall
        millisecond this client, its event loop or the HTTP stacks spend would count `scale`
        times (at x20, 100 ms of loop lag on a busy 2-core box reads as 2 s of TTFT), which
        measures the laptop, not the simulated GPU. The simulator's stamps are its ground truth."""
        if scale != 1.0:
            st = self.server_times()
            if st is not None:
                return st[0], st[1], "server"
        ttft, e2e = self.ttft, self.e2e
        return (None if ttft is None else ttft * scale), (None if e2e is None else e2e * scale), "client"

    def itls(self) -> list[float]:
        ev = self.token_events
        return spread_gaps([(ev[i][0] - ev[i - 1][0], ev[i][1]) for i in range(1, len(ev))])

    def record(self, arm: str, level: int, offered: int, scale: float, in_window: bool) -> RequestRecord:
        """The requests.csv row: client durations x scale (simulated seconds when sped up)."""

        def s(v: Optional[float]) -> Optional[float]:
            return None if v is None else v * scale

        meta = self.final_meta or {}
        out = self.completion_tokens
        ttft, e2e, timing = self.timed(scale)
        itl = self.itls()
        tpot = None
        if ttft is not None and e2e is not None and out is not None and out > 1:
            tpot = (e2e - ttft) / (out - 1)
        verify = meta.get("spec_verify_ct")
        accept = out / verify if (out and isinstance(verify, (int, float)) and verify > 0) else None
        qt = meta.get("queue_time")
        return RequestRecord(
            arm=arm, level=level, offered_concurrency=offered, request_id=self.request_id,
            t_scheduled=self.t_scheduled_wall,
            t_start=self.t_sent_wall if self.t_sent_wall is not None else self.t_scheduled_wall,
            t_end=self.wall(self.t_end) if self.t_end is not None and self.t_sent is not None else None,
            ttft_s=ttft, e2e_s=e2e, timing=timing, prompt_tokens=self.prompt_tokens, output_tokens=out,
            itl_mean_s=s(sum(itl) / len(itl)) if itl else None,
            itl_p99_s=s(percentile(itl, 99)), tpot_s=tpot,
            spec_verify_ct=verify if isinstance(verify, int) else None, accept_length=accept,
            first_byte_s=s(None if self.t_first_byte is None else self.t_first_byte - self.t_sent),
            # Server-side durations are already in the server's (simulated) seconds: not rescaled.
            queue_time_s=float(qt) if isinstance(qt, (int, float)) else None,
            chunks=self.events, in_window=in_window, status=self.status, error=self.error,
        )


class GenerateClient:
    """One arm's connection pool. Sized to the highest level so no hidden cap sits below it."""

    def __init__(self, base_url: str, *, max_concurrency: int, timeout_s: float = 600.0,
                 api_key_env: Optional[str] = None):
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"  # never logged or recorded
        self.url = base_url.rstrip("/")
        self.max_concurrency = max_concurrency
        self._headers = headers
        self._timeout = httpx.Timeout(timeout_s, connect=10.0)
        # One single-connection httpx client per concurrent stream, kept on a free list.
        # A shared pool of N connections scans all N on every request (httpcore's pool is
        # O(N) per request: 120 vs 80 ms CPU per 1k tokens at C=40 here), and a pool limit
        # below the level would silently cap concurrency. Keep-alive still reuses each socket.
        # Building an SSL context costs ~0.1 s of CPU: one, shared by every stream's client.
        self._verify = httpx.create_ssl_context() if self.url.startswith("https") else False
        self._free: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []
        self._client = self._new_client()  # for the odd non-streaming call (flush_cache)

    def _new_client(self) -> httpx.AsyncClient:
        c = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout, verify=self._verify,
                              limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
        self._all.append(c)
        return c

    async def aclose(self) -> None:
        for c in self._all:
            await c.aclose()
        self._all.clear()
        self._free.clear()

    async def flush_cache(self, timeout_s: float = 30.0) -> Optional[str]:
        """POST /flush_cache?timeout=S (waits for the server to go idle). None on success, else why."""
        try:
            r = await self._client.post("/flush_cache", params={"timeout": timeout_s}, timeout=timeout_s + 10)
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}"
        return None if r.status_code == 200 else f"HTTP {r.status_code}: {r.text[:120]}"

    async def generate(self, prompt: Prompt, max_new_tokens: int, outcome: RequestOutcome) -> RequestOutcome:
        body = prompt.payload()
        body["sampling_params"] = {"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 0.0}
        body["stream"] = True
        payload = json.dumps(body).encode()
        reused = bool(self._free)
        client = self._free.pop() if reused else self._new_client()
        outcome = await self._attempt(client, payload, outcome)
        if reused and outcome.status == "error" and outcome.t_first_byte is None and outcome.error \
                and outcome.error.startswith(_STALE_ERRORS):
            # A kept-alive socket the server closed while it sat idle (uvicorn drops them after
            # 5 s; a sped-up sim's pause or drain is longer): nothing reached the server, so
            # send again on a fresh connection instead of recording a failure that was ours.
            await self._discard(client)
            outcome.status, outcome.error, outcome.t_end = "ok", None, None
            outcome = await self._attempt(self._new_client(), payload, outcome)
        return outcome

    async def _discard(self, client: httpx.AsyncClient) -> None:
        if client in self._free:
            self._free.remove(client)
        if client in self._all:
            self._all.remove(client)
        await client.aclose()

    async def drop_idle(self) -> None:
        """Close the kept-alive connections nobody is using (between levels they may go stale)."""
        idle, self._free = self._free, []
        for c in idle:
            if c in self._all:
                self._all.remove(c)
            await c.aclose()

    async def _attempt(self, client: httpx.AsyncClient, payload: bytes, outcome: RequestOutcome) -> RequestOutcome:
        last_tokens = 0
        last_event = b""
        buf = b""
        outcome.t_sent_wall = time.time()
        outcome.t_sent = time.perf_counter()
        try:
            async with client.stream("POST", "/generate", content=payload) as resp:
                outcome.t_first_byte = time.perf_counter()
                if resp.status_code != 200:
                    text = (await resp.aread())[:200].decode("utf-8", "replace")
                    outcome.status, outcome.error = "error", f"HTTP {resp.status_code}: {text.strip()}"
                    return outcome
                done = False
                async for raw in resp.aiter_raw():
                    now = time.perf_counter()  # stamp first, parse after
                    buf += raw
                    while True:
                        cut = buf.find(b"\n\n")
                        if cut < 0:
                            break
                        event, buf = buf[:cut], buf[cut + 2:]
                        if not event.startswith(b"data:"):
                            continue
                        data = event[5:].lstrip()
                        if data.startswith(b"[DONE]"):
                            done = True
                            outcome.t_end = now
                            break
                        outcome.events += 1
                        if data.startswith(b'{"error"'):
                            outcome.status = "error"
                            outcome.error = _error_message(data)
                            continue
                        ct = _int_after(data, _CT_KEY)
                        if ct is not None and ct > last_tokens:
                            outcome.token_events.append((now, ct - last_tokens))
                            last_tokens = ct
                        last_event = data
                    # After [DONE] keep reading to the end of the body: leaving a response
                    # unread makes httpx close the connection instead of reusing it.
                if outcome.t_end is None:
                    outcome.t_end = time.perf_counter()
                if not done and outcome.status == "ok":
                    # SGLang ends every stream with [DONE]; a body that stops short is a cut
                    # response (a server that died mid-stream), not a finished request.
                    outcome.status, outcome.error = "error", "stream ended without [DONE]"
        except httpx.TimeoutException as e:
            outcome.status, outcome.error = "timeout", f"{type(e).__name__}"
        except httpx.HTTPError as e:
            outcome.status, outcome.error = "error", f"{type(e).__name__}: {e}"[:200]
        finally:
            if outcome.t_end is None:
                outcome.t_end = time.perf_counter()
            self._free.append(client)
        if last_event:
            try:
                final = json.loads(last_event)
                meta = final.get("meta_info") or {}
                outcome.final_meta = trusted_meta(meta)
                if isinstance(meta.get("completion_tokens"), int):
                    outcome.completion_tokens = meta["completion_tokens"]
                if isinstance(meta.get("prompt_tokens"), int):
                    outcome.prompt_tokens = meta["prompt_tokens"]
                fr = meta.get("finish_reason")
                if isinstance(fr, dict) and fr.get("type") == "abort" and outcome.status == "ok":
                    outcome.status, outcome.error = "error", f"aborted: {fr.get('message')}"
            except (json.JSONDecodeError, AttributeError):
                outcome.prompt_tokens = _int_after(last_event, _PT_KEY)
                outcome.completion_tokens = last_tokens or None
        if outcome.status == "ok" and not outcome.token_events:
            outcome.status, outcome.error = "error", "stream ended without a token"
        return outcome


def _error_message(data: bytes) -> str:
    try:
        err = json.loads(data).get("error")
        msg = err.get("message") if isinstance(err, dict) else str(err)
    except (json.JSONDecodeError, AttributeError):
        msg = data[:200].decode("utf-8", "replace")
    return f"server error: {msg}"[:200]

"""The simulated scheduler: one asyncio task forms prefill/decode batches in simulated time, like
SGLang's event loop (prefill first when something can be admitted, else one decode/verify pass),
and hands each request its tokens through a small mailbox that the HTTP stream drains.

Admission is FIFO and needs the prompt and all of its max_new_tokens free in the KV pool, beside
the output room kept for the running requests (SGLang's new_token_ratio; all of it for 0.5.23's
requests that ignore EOS), and a free slot under max_running_requests; a decode pass that would
overflow the pool retracts the youngest request back to the queue, as SGLang does.

The prefix (radix) cache lives in the same pool: a request admitted with a cached prefix skips
computing it; its prompt enters the tree after its prefill, its whole sequence when it finishes.
What no running request holds is evictable: it counts as free room for admission and is evicted,
least recently used first, as soon as running requests need the slots. One simplification: a
running request is charged its whole sequence even where it shares a prefix with another running
request (SGLang charges a shared prefix once), so sharing saves compute here, not pool room.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

from specmon.servers.sim.clock import SimClock
from specmon.servers.sim.physics import Physics
from specmon.servers.sim.radix import RadixCache
from specmon.servers.sim.stablehash import draw, uniform

log = logging.getLogger("sglang.sim.scheduler")

WORDS = [" the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as", " was",
         " with", " be", " by", " on", " not", " he", " this", " are", " or", " his", " from", " at",
         " which", " but", " have", " an", " had", " they", " you", " were", " their", " one", " all",
         " we", " can", " her", " has", " there", " been", " if", " more", " when", " will", " would",
         " who", " so", " no", " code", " data", " model", " token", " cache", " batch", " step",
         " value", " state", " line", " file", " return", " self", " def", " class"]
EOS_TOKEN_ID = 2
CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.7 * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20
EAGLE_ALGOS = ("EAGLE", "EAGLE3")  # SGLang keys its radix tree by token pairs (bigrams) for these
IDLE_REPORT_S = 30.0
ACCEPT_STREAM = 0x5EED_ACCE_7000_0001  # xor'ed into a request's seed: its acceptance draws


@dataclass
class Update:
    """What one scheduler flush delivers to one request's stream."""
    new_tokens: int
    t: float                     # simulated time the tokens became available
    finished: bool = False
    error: Optional[str] = None


@dataclass(eq=False)
class SimRequest:
    rid: str
    prompt_len: int
    max_new_tokens: int
    target_len: int              # where it will stop (max_new_tokens with ignore_eos)
    stop_by_eos: bool
    t_created: float
    ignore_eos: bool = False     # sampling_params.ignore_eos: 0.5.23 reserves its whole remaining output
    log_metrics: bool = True
    stream: bool = True          # non-streamed requests get one output, at the end (as in SGLang)
    prefix_key: Optional[tuple] = None   # the prompt as tokens (None: never cached, e.g. the warm-up)
    stream_interval: Optional[int] = None  # sampling_params.stream_interval (None: the server's)
    seed: int = 0                # the request's own draws (token ids, acceptance) come from this
    # scheduler state
    prefilled: int = 0
    cached_tokens: int = 0       # prefix-cache hit at first admission (meta_info, cached_tokens_total)
    tree_node: object = None     # the radix node this request holds while it runs
    _tree_key: Optional[tuple] = None
    output_len: int = 0
    t_queued: float = 0.0
    t_forward_entry: Optional[float] = None
    t_prefill_done: Optional[float] = None
    t_first_token: Optional[float] = None
    t_finished: Optional[float] = None
    verify_ct: int = 0
    accepted_drafts: int = 0
    accept_hist: list = field(default_factory=list)
    retractions: int = 0
    accept_level: int = -1
    finished: bool = False
    aborted: bool = False
    # delivery
    delivered: int = 0
    t_last_delivery: Optional[float] = None
    pending: list = field(default_factory=list)   # flushed updates the stream has not read yet
    staged_n: int = 0            # tokens produced since the last flush, not visible yet
    staged_t: float = 0.0
    staged_fin: bool = False
    owed: bool = False           # SGLang's stream_interval rule asked for an output since the last flush
    steps_since: int = 0         # decode steps since this stream's last flush (coalescing, see _deliver)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    _ids: list = field(default_factory=list)
    _text_parts: list = field(default_factory=list)

    @property
    def seq_len(self) -> int:
        return self.prefilled + self.output_len

    def token_ids(self, n: int) -> list[int]:
        while len(self._ids) < n:
            i = len(self._ids)
            if self.stop_by_eos and i == self.target_len - 1:
                self._ids.append(EOS_TOKEN_ID)
            else:
                self._ids.append(100 + draw(self.seed, i) % 31000)
        return self._ids[:n]

    def ids_between(self, a: int, b: int) -> list[int]:
        """Output token ids a..b-1 (what a stream chunk adds), without copying the rest."""
        if len(self._ids) < b:
            self.token_ids(b)
        return self._ids[a:b]

    @staticmethod
    def text_of(ids: list[int]) -> str:
        return "".join("" if tid == EOS_TOKEN_ID else WORDS[tid % len(WORDS)] for tid in ids)

    def text_upto(self, n: int) -> str:
        ids = self.token_ids(n)
        while len(self._text_parts) < n:
            tid = ids[len(self._text_parts)]
            self._text_parts.append("" if tid == EOS_TOKEN_ID else WORDS[tid % len(WORDS)])
        return "".join(self._text_parts[:n])


class Hooks:
    """Observers of scheduler events (metrics, faults); all methods optional no-ops."""

    def on_prefill_report(self, s: "Scheduler", new_seqs: int, new_tokens: int, cached: int,
                          running_before: int, input_tput: float) -> None: ...
    def on_decode_report(self, s: "Scheduler", window: dict) -> None: ...
    def on_idle_report(self, s: "Scheduler") -> None: ...
    def on_prefill_pass(self, s: "Scheduler", new_tokens: int, cached: int) -> None: ...
    def on_decode_pass(self, s: "Scheduler", tokens: int) -> None: ...
    def on_first_scheduled(self, s: "Scheduler", r: SimRequest) -> None: ...
    def on_prefill_done(self, s: "Scheduler", r: SimRequest) -> None: ...
    def on_chunk(self, s: "Scheduler", r: SimRequest, new_tokens: int, t: float) -> None: ...
    def on_finish(self, s: "Scheduler", r: SimRequest) -> None: ...
    def on_retract(self, s: "Scheduler", r: SimRequest, in_tok: int, out_tok: int) -> None: ...
    def on_evict(self, s: "Scheduler", tokens: int, duration_s: float) -> None: ...


class Scheduler:
    def __init__(self, physics: Physics, clock: SimClock, *, max_running_requests: int,
                 chunked_prefill_size: int, max_prefill_tokens: int, decode_log_interval: int,
                 hooks: Optional[Hooks] = None, log_lines: bool = True, seed: int = 0,
                 stream_interval: int = 1, coalesce_steps: int = 1, radix_cache: bool = True,
                 sglang_version: str = "0.5.23"):
        self.ph = physics
        self.clock = clock
        self.max_total_tokens = physics.max_total_tokens
        self.max_running_requests = max_running_requests
        self.chunked_prefill_size = chunked_prefill_size
        self.max_prefill_tokens = max_prefill_tokens
        self.decode_log_interval = max(1, decode_log_interval)
        self.hooks = hooks or Hooks()
        self.log_lines = log_lines
        self.rng = random.Random(seed)
        # SGLang's --stream-interval, and how many decode steps one chunk may hold (1 at --speed
        # below 2; see _deliver and main.py).
        self.stream_interval = max(1, stream_interval)
        self.coalesce_steps = max(1, coalesce_steps)
        self.spec = bool(physics.p.drafter.algorithm)
        # 0.5.23's log lines ("#pending-token", acceptance as accepted / proposed drafts).
        self.new_shapes = sglang_version != "0.5.10"
        self.bigram_keys = physics.p.drafter.algorithm in EAGLE_ALGOS

        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.chunked: Optional[SimRequest] = None
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.t = 0.0                       # simulated time the GPU is busy until
        self._wake = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._dirty: list = []             # requests whose staged tokens go out at the next flush
        self.cache: Optional[RadixCache] = RadixCache() if radix_cache else None
        self.stalled_until_wall = 0.0
        # statistics
        self.finished_count = 0
        self.last_gen_throughput = 0.0
        self.lifetime_verify = 0           # request-passes (one per request per verify pass)
        self.lifetime_spec_tokens = 0
        self.window = self._new_window()
        self.last_prefill_t: Optional[float] = None
        self.last_prefill_tokens = 0
        self.decode_steps = 0
        self.last_spec_accept_length = 0.0
        self.last_spec_accept_rate = 0.0
        self.last_cache_hit_rate = 0.0
        self.total_retracted = 0
        # Simulated seconds with nothing running or queued (sglang:scheduler_idle_seconds_total):
        # the closed spans, and the start of the open one (None while busy).
        self.idle_closed_s = 0.0
        self.pending_after_batch = 0
        self.total_prefill_uncached_tokens = 0   # /v1/loads (0.5.23): prompt tokens computed, all passes
        self.total_prefill_busy_s = 0.0          # and the simulated time those prefill passes took
        # 0.5.23's decode step-time moment sums (/v1/loads decode_moments): steps, sum of batch
        # sizes, of step microseconds, of batch size squared, of batch x step us, tokens generated.
        self.decode_moment_totals = [0.0] * 6
        self.idle_since: Optional[float] = 0.0
        self.on_finished_callbacks: list[Callable[[SimRequest], None]] = []

    # -- public API ----------------------------------------------------------------------------
    def start(self) -> None:
        self.idle_since = self.clock.now()  # idle time counts from when the scheduler runs, as SGLang's
        self._task = asyncio.get_running_loop().create_task(self._loop())
        self._task.add_done_callback(self._on_loop_done)

    @staticmethod
    def _on_loop_done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            # A dead scheduler would hang every stream: fail loudly, like SGLang's watchdog.
            log.error("Scheduler hit an exception", exc_info=task.exception())
            import os
            os._exit(1)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    def submit(self, r: SimRequest) -> None:
        r.t_queued = self.clock.now()
        if r.accept_level < 0 and self.spec:
            r.accept_level = self.ph.accept_level_for(r.seed)
        self.waiting.append(r)
        self._wake.set()

    def abort(self, r: SimRequest) -> None:
        """Client went away: free its slot."""
        if r.finished:
            return
        r.aborted = True
        r.finished = True
        if r in self.waiting:
            self.waiting.remove(r)
        if r in self.running:
            self.running.remove(r)
        if self.chunked is r:
            self.chunked = None
        self._release(r)

    def flush_prefix_cache(self) -> None:
        """/flush_cache (the server is idle: nothing holds a node)."""
        if self.cache is not None:
            self.cache.reset()

    @property
    def num_used_tokens(self) -> int:
        n = sum(r.seq_len for r in self.running)
        if self.chunked is not None:
            n += self.chunked.prefilled
        return n

    @property
    def token_usage(self) -> float:
        return self.num_used_tokens / self.max_total_tokens if self.max_total_tokens else 0.0

    @property
    def lifetime_accept_length(self) -> Optional[float]:
        if not self.spec or self.lifetime_verify == 0:
            return None
        return self.lifetime_spec_tokens / self.lifetime_verify

    @property
    def idle_seconds(self) -> float:
        """Simulated seconds this scheduler had no work, up to now."""
        if self.idle_since is None:
            return self.idle_closed_s
        return self.idle_closed_s + max(0.0, self.clock.now() - self.idle_since)

    @property
    def kv_evictable_tokens(self) -> int:
        """Pool slots held only by the prefix cache (freed on demand)."""
        return self.cache.evictable_size if self.cache is not None else 0

    @property
    def kv_available_tokens(self) -> int:
        return max(0, self.max_total_tokens - self.num_used_tokens - self.kv_evictable_tokens)

    @property
    def pending_tokens(self) -> int:
        """Prompt tokens still to compute: the queue's and the rest of a chunked prefill (0.5.23's
        "#pending-token", /v1/loads num_waiting_uncached_tokens)."""
        n = sum(r.prompt_len - r.prefilled for r in self.waiting)
        if self.chunked is not None:
            n += self.chunked.prompt_len - self.chunked.prefilled
        return n

    def is_idle(self) -> bool:
        return not self.waiting and not self.running and self.chunked is None

    # -- prefix cache (SGLang's RadixCache, page size 1) ----------------------------------------
    def _key_of(self, r: SimRequest, n_tokens: int) -> tuple:
        """The tree key of the first n_tokens of r's prompt (EAGLE: token pairs, one fewer)."""
        if r._tree_key is None:
            k = r.prefix_key
            r._tree_key = tuple(zip(k, k[1:])) if self.bigram_keys else k
        return r._tree_key[:max(0, n_tokens - 1)] if self.bigram_keys else r._tree_key[:n_tokens]

    def _match(self, r: SimRequest):
        """(cached tokens, node) for r's prompt; at most prompt_len - 1, as SGLang leaves the last
        prompt token to compute (its logits give the first output token)."""
        if self.cache is None or r.prefix_key is None:
            return 0, None
        return self.cache.match(self._key_of(r, r.prompt_len - 1))

    def _hold(self, r: SimRequest, node) -> None:
        if node is r.tree_node:
            return
        if node is not None:
            self.cache.lock(node)
        if r.tree_node is not None:
            self.cache.unlock(r.tree_node)
        r.tree_node = node

    def _cache_prefilled(self, r: SimRequest) -> None:
        """After a prefill pass (or chunk): r's computed prompt enters the tree, r holds it."""
        if self.cache is not None and r.prefix_key is not None:
            self._hold(r, self.cache.insert(self._key_of(r, r.prefilled)))

    def _cache_finished(self, r: SimRequest) -> None:
        """r is done: its sequence with KV (prompt + every output token but the last, which was
        sampled and never fed back) stays in the tree, evictable."""
        if self.cache is not None and r.prefix_key is not None and not r.aborted:
            seq = r.prefix_key + tuple(r.token_ids(r.output_len)[:max(0, r.output_len - 1)])
            self.cache.insert(tuple(zip(seq, seq[1:])) if self.bigram_keys else seq)
        self._release(r)

    def _release(self, r: SimRequest) -> None:
        if r.tree_node is not None:
            self.cache.unlock(r.tree_node)
            r.tree_node = None

    def _make_room(self) -> None:
        """The pool holds running requests' KV plus the evictable cache: evict (LRU) what overflows."""
        if self.cache is None:
            return
        over = self.num_used_tokens + self.cache.evictable_size - self.max_total_tokens
        if over > 0:
            t0 = time.perf_counter()
            freed = self.cache.evict(over)
            if freed:
                self.hooks.on_evict(self, freed, time.perf_counter() - t0)

    # -- the loop ------------------------------------------------------------------------------
    def _new_window(self) -> dict:
        return {"tokens": 0, "passes": 0, "req_passes": 0, "spec_tokens": 0, "t0": None}

    async def _loop(self) -> None:
        last_idle_report = self.clock.now()
        while True:
            if self.is_idle():
                if self.idle_since is None:
                    self.idle_since = max(self.t, self.clock.now())
                self._flush()
                self.clock.hold_near(None)
                self._wake.clear()
                timeout = max(0.001, (last_idle_report + IDLE_REPORT_S - self.clock.now()) / self.clock.speed)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except asyncio.TimeoutError:
                    self.new_token_ratio = INIT_NEW_TOKEN_RATIO
                    self.last_gen_throughput = 0.0
                    self.hooks.on_idle_report(self)
                    last_idle_report = self.clock.now()
                    continue
                # The GPU was idle: work starts when the request arrived, not when this task woke
                # up (event-loop latency would otherwise be multiplied by the speed factor).
                first = min((r.t_queued for r in self.waiting), default=self.clock.now())
                self.t = max(self.t, first)
                if self.idle_since is not None:
                    self.idle_closed_s += max(0.0, self.t - self.idle_since)
                    self.idle_since = None
                self.window["t0"] = None
            if self.stalled_until_wall > time.monotonic():
                self._flush()
                await asyncio.sleep(self.stalled_until_wall - time.monotonic())
                self.t = max(self.t, self.clock.now())
            # One forward pass starting at self.t.
            if not self._run_prefill():
                if self.running:
                    self._run_decode()
                elif self.waiting and self.waiting[0].t_queued > self.t:
                    # Nothing to do until the next arrival (it was stamped ahead of the scheduler).
                    self.t = self.waiting[0].t_queued
                    continue
                else:
                    # Waiting requests that cannot be admitted and nothing running: cannot happen
                    # unless one request is bigger than the pool; fail it.
                    r = self.waiting.popleft()
                    r.finished = True
                    r.pending.append(Update(0, self.t, True, error=(
                        f"Input length ({r.prompt_len} tokens) exceeds the maximum allowed length "
                        f"({self.max_total_tokens} tokens). Use a shorter input or enable --allow-auto-truncate.")))
                    r.event.set()
                    continue
            self.clock.hold_near(self.t)
            delay = self.clock.wall_delay(self.t)
            # The pass's tokens exist when it ends (SGLang streams them after the forward): sleep
            # to the end of the pass first, then flush. Flushing before the sleep handed every
            # token to clients one pass early (client TTFT read ~10% under the stamps at C=150).
            # Every pass is flushed: what a stream gets per pass is decided in _deliver.
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            self._flush()
            last_idle_report = self.t

    def _flush(self) -> None:
        if not self._dirty:
            return
        for r in self._dirty:
            # A stream sees exactly what was flushed: the next pass (computed before the stream
            # task gets to run) stages its tokens for the next flush, so the first chunk carries
            # only the first token, as SGLang's does.
            if r.aborted:
                continue
            r.pending.append(Update(r.staged_n, r.staged_t, r.staged_fin))
            r.staged_n = 0
            r.event.set()
        self._dirty.clear()

    def _deliver(self, r: SimRequest, n: int, t: float, finished: bool = False) -> None:
        """Stages a pass's n tokens for r and decides whether r's stream gets them at this pass's
        flush. As SGLang's scheduler decides per request after each forward pass: a streamed
        request outputs its first token, its finish, and otherwise when its output length L
        satisfies L % stream_interval == 1 (every pass when the interval is 1); with speculative
        decoding L grows by the pass's accepted tokens, so a pass that jumps over the residue
        outputs nothing. A non-streamed request outputs once, at the end (SGLang's tokenizer
        manager answers it only then). docs/field-notes.md, SGLang notes 6.1.

        Coalescing, the simulator's own rule: a stream's chunk holds at most coalesce_steps
        decode steps (1 at --speed below 2, floor(speed) above: main.py), so a stream never gets
        more chunks per wall second than it would at --speed 1. Without it, at --speed 100 a
        decode step is ~0.25 ms of wall time and a chunk per step per stream is more than two
        cores can write and read; the CPU-starved clock would then distort every figure. First
        tokens and finishes are never held back (TTFT and e2e stay exact)."""
        if r.aborted:
            return
        r.staged_n += n
        r.staged_t = t
        r.staged_fin = finished
        if finished:
            ready = True
        elif not r.stream:
            ready = False
        elif r.output_len <= n:  # the first token(s)
            ready = True
        else:
            iv = r.stream_interval or self.stream_interval
            if iv <= 1 or r.output_len % iv == 1:
                r.owed = True
            r.steps_since += 1
            ready = r.owed and r.steps_since >= self.coalesce_steps
        if ready:
            r.owed = False
            r.steps_since = 0
            self._dirty.append(r)
        if r.stream:
            self.hooks.on_chunk(self, r, n, t)
        elif finished:
            self.hooks.on_chunk(self, r, r.output_len, t)

    # -- prefill -------------------------------------------------------------------------------
    def _reserve_ratio(self, r: SimRequest) -> float:
        """The share of a running request's remaining output SGLang keeps room for: the decaying
        new_token_ratio, except that 0.5.23 keeps all of it for a request that ignores EOS (it
        cannot end early: schedule_policy's running-request offset)."""
        return 1.0 if r.ignore_eos and self.new_shapes else self.new_token_ratio

    def _rem_total_tokens(self) -> float:
        reserved = 0.0
        for r in self.running:
            reserved += min(r.max_new_tokens - r.output_len, CLIP_MAX_NEW_TOKENS) * self._reserve_ratio(r)
        if self.chunked is not None:
            c = self.chunked
            reserved += (c.prompt_len - c.prefilled) + min(c.max_new_tokens, CLIP_MAX_NEW_TOKENS) * self._reserve_ratio(c)
        return self.max_total_tokens - self.num_used_tokens - reserved

    def _run_prefill(self) -> bool:
        if self.chunked is None and (not self.waiting or self.waiting[0].t_queued > self.t):
            return False
        running_before = len(self.running)
        budget_chunk = self.chunked_prefill_size
        budget_prefill = self.max_prefill_tokens
        rem_total = self._rem_total_tokens()
        batch: list[tuple[SimRequest, int]] = []     # (request, tokens computed this pass)
        if self.chunked is not None:
            c = self.chunked
            n = min(c.prompt_len - c.prefilled, budget_chunk)
            batch.append((c, n))
            budget_chunk -= n
            budget_prefill -= n
        slots = self.max_running_requests - len(self.running) - (1 if self.chunked is not None else 0)
        cached = 0
        while self.waiting and budget_chunk > 0 and slots > 0:
            r = self.waiting[0]
            if r.t_queued > self.t:
                break  # arrives after this batch starts
            # A request is admitted with room for its prompt and all of its max_new_tokens (both
            # releases' PrefillAdder.add_one_req); only running requests' room is scaled down.
            need_total = r.prompt_len + min(r.max_new_tokens, CLIP_MAX_NEW_TOKENS)
            if need_total > rem_total:
                break
            # Matched when it is scheduled, as SGLang does: a prefix cached while it waited counts.
            hit, node = self._match(r)
            need_in = r.prompt_len - hit
            if need_in > budget_prefill and batch:
                break
            self.waiting.popleft()
            rem_total -= need_total
            slots -= 1
            self._hold(r, node)
            if r.retractions == 0:
                r.cached_tokens = hit  # SGLang counts a request's hit once, not again after a retraction
            cached += hit
            r.prefilled = hit
            n = min(r.prompt_len - r.prefilled, budget_chunk)
            batch.append((r, n))
            budget_chunk -= n
            budget_prefill -= n
            if r.t_forward_entry is None:
                r.t_forward_entry = max(self.t, r.t_queued)
            self.hooks.on_first_scheduled(self, r)
        if not batch:
            return False
        new_tokens = sum(n for _, n in batch)
        ctx_pairs = sum(n * (r.prefilled + n / 2.0) for r, n in batch)
        dur = self.ph.prefill_time(new_tokens, ctx_pairs, len(batch))
        self.total_prefill_uncached_tokens += new_tokens
        self.total_prefill_busy_s += dur
        t0, t_end = self.t, self.t + dur
        self.t = t_end
        # Report happens at batch formation in SGLang (the log line precedes the forward pass).
        # What stays to compute once this batch ran: the queue's and the batch's unprefilled rest.
        self.pending_after_batch = sum(r.prompt_len - r.prefilled for r in self.waiting) + \
            sum(r.prompt_len - r.prefilled - n for r, n in batch)
        self._prefill_report(len([1 for r, _ in batch if r is not self.chunked]), new_tokens, cached,
                             running_before, t0)
        self.chunked = None
        for r, n in batch:
            r.prefilled += n
            self._cache_prefilled(r)
            if r.prefilled < r.prompt_len:
                self.chunked = r
                continue
            if r.output_len > 0:
                # A retracted request back from the queue: its KV is rebuilt, no new token.
                self.running.append(r)
                continue
            # Prefill done: the first token is sampled at the end of the pass.
            r.t_prefill_done = t_end
            r.output_len = 1
            r.t_first_token = t_end
            self.hooks.on_prefill_done(self, r)
            if r.output_len >= r.target_len:
                self._finish(r, t_end, 1)
            else:
                self.running.append(r)
                self._deliver(r, 1, t_end)
        self._make_room()
        self.hooks.on_prefill_pass(self, new_tokens, cached)
        return True

    def _prefill_report(self, new_seqs: int, new_tokens: int, cached: int, running_before: int, t: float) -> None:
        if self.last_prefill_t is not None and t > self.last_prefill_t:
            input_tput = self.last_prefill_tokens / (t - self.last_prefill_t)
        else:
            input_tput = 0.0
        self.last_prefill_t, self.last_prefill_tokens = t, new_tokens
        total = new_tokens + cached
        self.last_cache_hit_rate = cached / total if total else 0.0
        if self.log_lines:
            log.info(f"Prefill batch, #new-seq: {new_seqs}, #new-token: {new_tokens}, #cached-token: {cached}, "
                     f"token usage: {self.token_usage:.2f}, #running-req: {running_before}, "
                     f"#queue-req: {len(self.waiting)}, "
                     + (f"#pending-token: {self.pending_after_batch}, " if self.new_shapes else "")
                     + f"cuda graph: False, input throughput (token/s): {input_tput:.2f}")
        self.hooks.on_prefill_report(self, new_seqs, new_tokens, cached, running_before, input_tput)

    # -- decode --------------------------------------------------------------------------------
    def _retract_if_needed(self) -> None:
        need = len(self.running) * self.ph.num_draft_tokens
        while self.running and self.max_total_tokens - self.num_used_tokens < need and len(self.running) > 1:
            # SGLang retracts the request with the fewest output tokens (longest prompt on ties).
            victim = min(self.running, key=lambda r: (r.output_len, -r.prompt_len))
            self.running.remove(victim)
            in_tok, out_tok = victim.prompt_len, victim.output_len
            victim.retractions += 1
            victim.prefilled = 0
            self._release(victim)  # its cached prompt stays in the tree, evictable
            # It re-prefills prompt + what it already generated; output continues from there.
            self.waiting.appendleft(victim)
            self.total_retracted += 1
            self.hooks.on_retract(self, victim, in_tok, out_tok)
            need = len(self.running) * self.ph.num_draft_tokens
            total_decoded = sum(r.output_len for r in self.running)
            total_max_new = sum(r.max_new_tokens for r in self.running) or 1
            self.new_token_ratio = min(1.0, (total_decoded + RETRACT_DECODE_STEPS * len(self.running)) / total_max_new)
            log.info(f"KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                     f"#new_token_ratio: {self.new_token_ratio:.4f}")

    def _run_decode(self) -> None:
        self._retract_if_needed()
        batch = self.running
        bs = len(batch)
        sum_seq = sum(r.seq_len for r in batch)
        dur = self.ph.decode_time(bs, sum_seq)
        t_end = self.t + dur
        if self.window["t0"] is None:
            self.window["t0"] = self.t
        self.t = t_end
        emitted_total = 0
        still = []
        for r in batch:
            if self.spec:
                # Each request draws from its own stream: what it emits does not depend on what
                # else shares the batch, so --seed reproduces it under any concurrency.
                k = self.ph.sample_emitted(r.accept_level, uniform(r.seed ^ ACCEPT_STREAM, r.verify_ct))
                r.verify_ct += 1
                acc = k - 1
                while len(r.accept_hist) <= acc:
                    r.accept_hist.append(0)
                r.accept_hist[acc] += 1
                r.accepted_drafts += acc
                self.window["spec_tokens"] += k
                self.lifetime_spec_tokens += k
                self.lifetime_verify += 1
            else:
                k = 1
            k = min(k, r.target_len - r.output_len)
            r.output_len += k
            emitted_total += k
            if r.output_len >= r.target_len:
                self._finish(r, t_end, k)
            else:
                still.append(r)
                self._deliver(r, k, t_end)
        self.window["tokens"] += emitted_total
        self.window["passes"] += 1
        m, step_us = self.decode_moment_totals, float(int(dur * 1e6))
        if bs > 0 and step_us > 0:
            m[0] += 1.0
            m[1] += bs
            m[2] += step_us
            m[3] += bs * bs
            m[4] += bs * step_us
            m[5] += emitted_total
        self.window["req_passes"] += bs
        self.decode_steps += 1
        self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY)
        self.hooks.on_decode_pass(self, emitted_total)
        if self.decode_steps % self.decode_log_interval == 0:
            self._decode_report(bs, sum_seq)   # before finished requests leave the batch
        self.running = still
        self._make_room()

    def _decode_report(self, bs: int, sum_seq: int) -> None:
        w = self.window
        span = self.t - w["t0"] if w["t0"] is not None else 0.0
        self.last_gen_throughput = w["tokens"] / span if span > 0 else 0.0
        if self.spec and w["req_passes"]:
            self.last_spec_accept_length = w["spec_tokens"] / w["req_passes"]
            if self.new_shapes:  # 0.5.23: accepted drafts / proposed drafts (the bonus token left out)
                drafts = self.ph.num_draft_tokens - 1
                self.last_spec_accept_rate = (w["spec_tokens"] - w["req_passes"]) / (w["req_passes"] * drafts) \
                    if drafts > 0 else 0.0
            else:  # 0.5.10.post1: accepted tokens (bonus included) / draft tokens
                self.last_spec_accept_rate = self.last_spec_accept_length / self.ph.num_draft_tokens
        self.last_cache_hit_rate = 0.0
        if self.log_lines:
            spec = (f"accept len: {self.last_spec_accept_length:.2f}, accept rate: {self.last_spec_accept_rate:.2f}, "
                    if self.spec else "")
            log.info(f"Decode batch, #running-req: {bs}, #token: {self.num_used_tokens}, "
                     f"token usage: {self.token_usage:.2f}, {spec}cuda graph: True, "
                     f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: {len(self.waiting)}")
        self.hooks.on_decode_report(self, {"bs": bs, "sum_seq": sum_seq})
        self.window = self._new_window()
        self.window["t0"] = self.t

    def _finish(self, r: SimRequest, t: float, k: int) -> None:
        r.finished = True
        r.t_finished = t
        self._cache_finished(r)
        self.finished_count += 1
        self._deliver(r, k, t, finished=True)
        self.hooks.on_finish(self, r)
        for cb in self.on_finished_callbacks:
            cb(r)

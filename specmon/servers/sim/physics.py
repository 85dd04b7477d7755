"""The cost model: KV pool size, running cap, prefill time, decode/verify step time, acceptance.

Roofline per forward pass: time = overhead + max(bytes / achieved bandwidth, FLOPs / achieved FLOP/s).
Decode reads all weights once per pass plus every running request's KV; a verify pass with k draft
tokens multiplies the GEMM FLOPs by k, so with big batches the pass turns compute bound and
speculation stops paying.
"""

from __future__ import annotations

import bisect
import random
from typing import Optional

from specmon.servers.sim.specs import GB, Profile
from specmon.servers.sim.stablehash import mix64

KV_DTYPE_BYTES = {"auto": 2.0, "bf16": 2.0, "bfloat16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp4_e2m1": 0.5}
# Attention FLOPs per (query token, context token) pair, per layer: QK^T and PV, 2 FLOPs per MAC.
ATTN_Q_DIM = 32 * 256
ACCEPT_SPREAD_LEVELS = 9
ACCEPT_SPREAD = 0.35
ACCEPT_LEVEL_STREAM = 0x1E7E_15EE_D000_0002  # xor'ed into a request's seed: which level it gets


class Physics:
    def __init__(self, p: Profile, seed: int = 0):
        self.p = p
        gpu, model, d = p.gpu, p.model, p.drafter
        self.kv_bytes_per_token = model.kv_bytes_per_token(KV_DTYPE_BYTES.get(p.kv_cache_dtype, 1.0))
        self.weight_bytes = model.weight_bytes[p.weight_format]
        self.draft_weight_bytes = d.weight_bytes
        self.bw = gpu.bandwidth_bps * gpu.mem_efficiency
        self.gemm_flops = gpu.flops[model.compute_format[p.weight_format]] * gpu.flop_efficiency
        # FP8 KV cache -> FP8 attention kernels (FlashInfer); BF16 KV -> BF16.
        kv_fmt = "fp8" if KV_DTYPE_BYTES.get(p.kv_cache_dtype, 1.0) <= 1.0 else "bf16"
        self.attn_flops = gpu.flops[kv_fmt] * gpu.flop_efficiency
        self.bf16_flops = gpu.flops["bf16"] * gpu.flop_efficiency
        per_token = self.kv_bytes_per_token + d.kv_bytes_per_token
        budget = gpu.memory_bytes * p.mem_fraction_static - self.weight_bytes - self.draft_weight_bytes - gpu.reserved_bytes
        self.memory_sized_tokens = max(0, int(budget / per_token))
        self.max_total_tokens = (min(p.max_total_tokens, self.memory_sized_tokens)
                                 if p.max_total_tokens else self.memory_sized_tokens)
        if p.max_running_requests:
            self.max_running_requests = p.max_running_requests
        elif d.algorithm:
            self.max_running_requests = 48  # SGLang's default cap when speculating
        else:
            self.max_running_requests = min(4096, max(2048, int(self.max_total_tokens / model.context_len * 512)))
        self.kv_cache_gb = self.max_total_tokens * self.kv_bytes_per_token / GB
        self.graph_gb = 1.9 if d.algorithm else 1.2
        self.num_draft_tokens = d.num_draft_tokens if d.algorithm else 1
        self.rng = random.Random(seed)
        self.accept_mean = d.accept_length.get(p.weight_format, 0.0) if d.algorithm else 1.0
        # Acceptance differs from prompt to prompt (code vs prose, repetition): each request gets one
        # of these per-request means, spread +-35% around the profile's mean. It also de-synchronises
        # requests that were admitted together, as on a real server.
        self.accept_levels = []
        if self.num_draft_tokens > 1:
            cap = self.num_draft_tokens * 0.97
            fs = [1 - ACCEPT_SPREAD + 2 * ACCEPT_SPREAD * i / (ACCEPT_SPREAD_LEVELS - 1)
                  for i in range(ACCEPT_SPREAD_LEVELS)]
            # Tokens/passes over many fixed-length requests is the harmonic mean of the per-request
            # means: scale so that it, not the plain mean, matches the profile.
            scale = 1.0
            for _ in range(20):
                ms = [min(cap, max(1.05, self.accept_mean * f * scale)) for f in fs]
                hm = len(ms) / sum(1 / m for m in ms)
                scale *= self.accept_mean / hm
            for m in ms:
                self.accept_levels.append(self._build_accept_cdf(m, self.num_draft_tokens))
        else:
            self.accept_levels.append([1.0])
        self._accept_cdf = self._build_accept_cdf(self.accept_mean, self.num_draft_tokens)

    # -- speculation -------------------------------------------------------------------------------
    @staticmethod
    def _build_accept_cdf(mean: float, max_tokens: int) -> list[float]:
        """CDF over tokens emitted per verify pass (1..max_tokens): each draft position is accepted
        with probability a given the previous one was, a chosen so the mean matches the profile."""
        if max_tokens <= 1:
            return [1.0]

        def mean_of(a: float) -> float:
            return sum(a ** i for i in range(max_tokens))

        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if mean_of(mid) < mean:
                lo = mid
            else:
                hi = mid
        a = (lo + hi) / 2
        probs = [(a ** (k - 1)) * ((1 - a) if k < max_tokens else 1.0) for k in range(1, max_tokens + 1)]
        cdf, acc = [], 0.0
        for pr in probs:
            acc += pr
            cdf.append(acc)
        cdf[-1] = 1.0
        return cdf

    def accept_level_for(self, request_seed: int) -> int:
        return mix64(request_seed ^ ACCEPT_LEVEL_STREAM) % len(self.accept_levels)

    def sample_emitted(self, level: int = -1, u: Optional[float] = None) -> int:
        """Tokens one request emits in one verify pass (accepted drafts + the bonus token);
        u is the uniform draw in [0, 1) to use (default: the next one of this object's rng)."""
        cdf = self._accept_cdf if level < 0 else self.accept_levels[level]
        return bisect.bisect_left(cdf, self.rng.random() if u is None else u) + 1

    # -- costs -------------------------------------------------------------------------------------
    def prefill_time(self, new_tokens: int, ctx_pairs: float, batch_size: int) -> float:
        """A prefill (extend) batch of `new_tokens` prompt tokens; ctx_pairs = sum over new tokens of
        the context each attends to."""
        gpu, model, d = self.p.gpu, self.p.model, self.p.drafter
        flops_gemm = 2.0 * model.params * new_tokens
        flops_attn = 4.0 * model.layers * ATTN_Q_DIM * ctx_pairs
        t = max(self.weight_bytes / self.bw, flops_gemm / self.gemm_flops) + flops_attn / self.attn_flops
        if d.algorithm:
            # The drafter must see the prompt too (MTP head / external drafter prefill).
            draft_flops = d.draft_pass_flops_per_token * new_tokens
            t += max(d.draft_pass_bytes / self.bw, draft_flops / self.bf16_flops) + d.draft_pass_overhead_s
        return gpu.step_overhead_s + t

    def decode_time(self, batch_size: int, sum_seq_len: int) -> float:
        """One decode step (or one draft+verify pass under speculation) for the running batch."""
        gpu, model, d = self.p.gpu, self.p.model, self.p.drafter
        k = self.num_draft_tokens
        mem = (self.weight_bytes + sum_seq_len * self.kv_bytes_per_token) / self.bw
        comp = 2.0 * model.params * batch_size * k / self.gemm_flops
        comp += 4.0 * model.layers * ATTN_Q_DIM * sum_seq_len * k / self.attn_flops * 0.25  # flash-decoding overlaps most
        t = gpu.step_overhead_s + max(mem, comp) + 0.15 * min(mem, comp)
        if d.algorithm:
            per_pass_mem = (d.draft_pass_bytes + sum_seq_len * d.kv_bytes_per_token) / self.bw
            per_pass_comp = d.draft_pass_flops_per_token * batch_size * max(1, d.draft_positions) / self.bf16_flops
            t += d.draft_passes * (d.draft_pass_overhead_s + max(per_pass_mem, per_pass_comp))
        return t

    def model_load_s(self) -> float:
        # Weights from local NVMe at ~3 GB/s, plus init.
        return 2.0 + (self.weight_bytes + self.draft_weight_bytes) / 3e9

    def graph_capture_s(self) -> float:
        return 12.0 + (20.0 if self.p.drafter.algorithm else 0.0)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b) if b else 0


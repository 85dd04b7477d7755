"""The GPU the simulator simulates, as nvidia-smi on that card would show it: served on the
simulator's own endpoint GET /specmon/simulated_gpu (JSON, `"simulated": true`), never by SGLang.

Memory (per GPU; TP shards weights and the KV pool, every rank holds its own CUDA graphs):
    used = CUDA context + weights + KV pool + CUDA graphs + activations
- weights: the profile's weight format (plus an external drafter's own weights);
- KV pool: max_total_num_tokens x bytes per token (the target's KV and a drafter's own), the
  same pool /server_info reports, so it follows --max-total-tokens and --mem-fraction-static;
- CUDA graphs: what /server_info's memory_usage says; activations: the rest of the headroom the
  cost model keeps out of the pool (Gpu.reserved_bytes);
- total: what nvidia-smi prints for the card (docs/field-notes.md G). The pools are allocated at
  startup, so memory does not move with load, as on SGLang.

Load (a trailing window of WINDOW_S simulated seconds over the scheduler's forward passes):
- utilization: the share of the window a pass was running (NVML's "a kernel was running");
- power: idle draw + (limit - idle) x the passes' intensity, time-weighted over the window. A
  pass's intensity goes from MEMORY_BOUND_INTENSITY (a decode pass that only streams weights
  and KV) to 1.0 (a compute-bound prefill at the board's power limit), by the share of the pass
  its GEMM and attention FLOPs take on the roofline;
- temperature: first-order towards idle_c + (hot_c - idle_c) x power share, time constant
  THERMAL_TAU_S.

The figures per card are in CARDS (docs/field-notes.md G says where each comes from).
"""

from __future__ import annotations

import math
import uuid
from collections import deque
from dataclasses import dataclass
from specmon.servers.sim.physics import ATTN_Q_DIM, Physics
from specmon.servers.sim.stablehash import stable_hash

MIB = 2**20
WINDOW_S = 5.0               # simulated seconds the utilization and power readings average over
MEMORY_BOUND_INTENSITY = 0.55  # share of the idle-to-limit span a purely memory-bound pass draws
THERMAL_TAU_S = 30.0         # simulated seconds for the die to get ~63% of the way to its new temperature
CONTEXT_BYTES = 512 * MIB    # CUDA context, cuBLAS/NCCL workspaces: what a process holds before any tensor


@dataclass(frozen=True)
class Card:
    total_bytes: int          # what nvidia-smi shows as the card's memory
    idle_w: float             # a card holding a loaded model, no kernel running
    limit_w: float            # the board's power limit
    idle_c: float = 32.0
    hot_c: float = 84.0       # at the power limit, in a server's airflow


CARDS = {
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": Card(total_bytes=97_887 * MIB, idle_w=35.0, limit_w=600.0),
    "NVIDIA H200": Card(total_bytes=143_771 * MIB, idle_w=78.0, limit_w=700.0, idle_c=37.0),
}


def card_for(ph: Physics) -> Card:
    """The card's figures; a profile's GPU not in CARDS gets its own memory and a generic draw."""
    c = CARDS.get(ph.p.gpu.name)
    if c is not None:
        return c
    return Card(total_bytes=int(ph.p.gpu.memory_bytes), idle_w=50.0, limit_w=500.0)


class PassMeter:
    """The forward passes of one scheduler: (start, end, intensity) in simulated time, kept for
    the trailing window. It stands between the scheduler and its cost model (Physics): every
    attribute is the cost model's, and the two cost calls are recorded as they are made (the
    scheduler's clock `t` is the pass's start when it asks for the pass's duration)."""

    def __init__(self, ph: Physics, sched) -> None:
        self._ph = ph
        self._sched = sched
        self.passes: deque[tuple[float, float, float]] = deque()

    def __getattr__(self, name):
        return getattr(self._ph, name)

    def _record(self, dur: float, compute_s: float) -> None:
        start = self._sched.t
        share = min(1.0, compute_s / dur) if dur > 0 else 0.0
        self.passes.append((start, start + dur, MEMORY_BOUND_INTENSITY + (1 - MEMORY_BOUND_INTENSITY) * share))
        cutoff = start - 2 * WINDOW_S
        while self.passes and self.passes[0][1] < cutoff:
            self.passes.popleft()

    def prefill_time(self, new_tokens: int, ctx_pairs: float, batch_size: int) -> float:
        dur = self._ph.prefill_time(new_tokens, ctx_pairs, batch_size)
        ph, model = self._ph, self._ph.p.model
        compute = (2.0 * model.params * new_tokens / ph.gemm_flops
                   + 4.0 * model.layers * ATTN_Q_DIM * ctx_pairs / ph.attn_flops)
        self._record(dur, compute)
        return dur

    def decode_time(self, batch_size: int, sum_seq_len: int) -> float:
        dur = self._ph.decode_time(batch_size, sum_seq_len)
        ph, model = self._ph, self._ph.p.model
        k = ph.num_draft_tokens
        compute = (2.0 * model.params * batch_size * k / ph.gemm_flops
                   + 4.0 * model.layers * ATTN_Q_DIM * sum_seq_len * k / ph.attn_flops * 0.25)
        self._record(dur, compute)
        return dur

    def window(self, now: float, span: float = WINDOW_S) -> tuple[float, float]:
        """(busy share, mean intensity while busy) over [now - span, now]."""
        lo = now - span
        busy = weighted = 0.0
        for start, end, intensity in self.passes:
            a, b = max(start, lo), min(end, now)
            if b > a:
                busy += b - a
                weighted += (b - a) * intensity
        if busy <= 0:
            return 0.0, 0.0
        return min(1.0, busy / span), weighted / busy


class SimulatedGpus:
    """Every simulated GPU of one simulated server: tp_size per DP rank."""

    def __init__(self, st) -> None:
        self.st = st
        self.tp = max(1, int(getattr(st.cfg.args, "tp_size", 1) or 1))
        self.meters = []
        for sched in st.ranks:
            meter = PassMeter(sched.ph, sched)
            sched.ph = meter
            self.meters.append(meter)
        self._temp: dict[int, tuple[float, float]] = {}  # gpu index -> (simulated time, degrees)
        seed = int(getattr(st, "seed", 0))
        port = getattr(st.cfg.args, "port", 0)
        # A card's uuid stays the same across restarts of the same server (its --seed and port).
        self._uuids = [f"GPU-{uuid.UUID(int=stable_hash(seed, port, i, 'gpu') << 64 | stable_hash(seed, port, i), version=4)}"
                       for i in range(len(self.meters) * self.tp)]

    def memory(self, ph: Physics) -> dict:
        """Bytes per GPU of one rank, by what holds them."""
        g, d = ph.p.gpu, ph.p.drafter
        weights = (ph.weight_bytes + ph.draft_weight_bytes) / self.tp
        kv = ph.max_total_tokens * (ph.kv_bytes_per_token + d.kv_bytes_per_token) / self.tp
        graphs = ph.graph_gb * 1e9
        activations = max(0.0, g.reserved_bytes - graphs)
        return {"context": CONTEXT_BYTES, "weights": int(weights), "kv_pool": int(kv),
                "cuda_graphs": int(graphs), "activations": int(activations)}

    def reading(self) -> dict:
        st = self.st
        now = st.clock.now()
        gpus = []
        for rank, meter in enumerate(self.meters):
            ph = meter._ph
            card = card_for(ph)
            mem = self.memory(ph)
            used = min(card.total_bytes, sum(mem.values()))
            busy, intensity = meter.window(now)
            power = card.idle_w + (card.limit_w - card.idle_w) * busy * intensity
            for t in range(self.tp):
                index = rank * self.tp + t
                gpus.append({
                    "index": index, "name": ph.p.gpu.name, "uuid": self._uuids[index], "dp_rank": rank, "tp_rank": t,
                    "memory_total_bytes": card.total_bytes, "memory_used_bytes": used,
                    "weights_bytes": mem["weights"], "kv_pool_bytes": mem["kv_pool"],
                    "cuda_graph_bytes": mem["cuda_graphs"], "activations_bytes": mem["activations"],
                    "context_bytes": mem["context"], "kv_pool_tokens": ph.max_total_tokens,
                    "utilization_pct": round(100.0 * busy, 1), "power_w": round(power, 1),
                    "power_limit_w": card.limit_w, "temperature_c": round(self._temperature(index, now, power, card), 1),
                })
        return {"simulated": True, "profile": st.cfg.profile.name, "sim_time_s": round(now, 3),
                "mem_fraction_static": st.ph.p.mem_fraction_static, "window_s": WINDOW_S, "gpus": gpus}

    def _temperature(self, index: int, now: float, power: float, card: Card) -> float:
        target = card.idle_c + (card.hot_c - card.idle_c) * (power - card.idle_w) / max(1.0, card.limit_w - card.idle_w)
        last = self._temp.get(index)
        if last is None:
            temp = target if now > 0 and power > card.idle_w else card.idle_c
        else:
            t0, temp0 = last
            temp = target + (temp0 - target) * math.exp(-max(0.0, now - t0) / THERMAL_TAU_S)
        self._temp[index] = (now, temp)
        return temp


def make_route(st):
    """The Starlette route of GET /specmon/simulated_gpu for this simulated server."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    gpus = SimulatedGpus(st)

    async def simulated_gpu(request):
        return JSONResponse(gpus.reading())

    return Route("/specmon/simulated_gpu", simulated_gpu, methods=["GET"])

"""What a simulator profile is made of: the GPU, the model, the drafter, and the profile that
ties them to SGLang's launch settings. The catalog of named profiles is in profiles.py; the cost
model that reads them is physics.py (neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

GB = 1e9


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: float
    bandwidth_bps: float          # HBM/GDDR bytes per second
    flops: dict                   # dense tensor FLOP/s by compute format ("bf16", "fp8", "fp4")
    mem_efficiency: float = 0.80  # fraction of peak bandwidth a decode kernel reaches
    flop_efficiency: float = 0.80  # MFU of big GEMMs (prefill, wide verify batches)
    step_overhead_s: float = 0.0025  # per forward pass: launch, sampling, scheduler
    reserved_bytes: float = 4.8 * GB  # activations, CUDA graphs, allocator slack


@dataclass(frozen=True)
class Model:
    name: str
    model_path: str
    architecture: str
    params: float                  # parameters touched per token (dense)
    weight_bytes: dict             # bytes of weights on the GPU by weight format
    compute_format: dict           # which tensor-core format the GEMMs run in, by weight format
    layers: int
    kv_heads: int
    head_dim: int
    context_len: int = 131072

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        return 2.0 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes


@dataclass(frozen=True)
class Drafter:
    name: str
    algorithm: Optional[str]       # SGLang --speculative-algorithm value, None = no speculation
    num_steps: int = 0
    eagle_topk: int = 0
    num_draft_tokens: int = 0      # tokens verified per request per pass (incl. the bonus slot)
    accept_length: dict = field(default_factory=dict)  # mean tokens per verify pass, by weight format
    weight_bytes: float = 0.0      # the drafter's own weights (0 for MTP heads inside the checkpoint)
    kv_bytes_per_token: float = 0.0  # the drafter's own KV per token
    draft_passes: int = 0          # sequential drafter forward passes per verify step
    draft_pass_bytes: float = 0.0  # bytes a drafter pass reads besides its KV
    draft_pass_flops_per_token: float = 0.0  # FLOPs per drafted position per pass
    draft_positions: int = 0       # positions each drafter pass produces per request
    draft_pass_overhead_s: float = 0.0003
    draft_model_path: Optional[str] = None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    gpu: Gpu
    model: Model
    weight_format: str             # "fp8" | "nvfp4"
    drafter: Drafter
    kv_cache_dtype: str = "fp8_e4m3"
    mem_fraction_static: float = 0.85
    max_total_tokens: Optional[int] = None
    max_running_requests: Optional[int] = None
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    quantization: Optional[str] = None
    attention_backend: str = "flashinfer"

    def with_overrides(self, **kw) -> "Profile":
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

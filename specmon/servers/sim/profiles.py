"""Hardware, model and drafter profiles for the simulator.

Numbers are public spec-sheet figures (GPU) or derived from the model shapes of docs/field-notes.md A; the
efficiency factors are the calibration knobs (see benchmarks/sim_calibration.py).
"""

from __future__ import annotations

from specmon.servers.sim.specs import GB, Drafter, Gpu, Model, Profile

RTX_PRO_6000 = Gpu(
    name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
    memory_bytes=95.6 * GB,
    bandwidth_bps=1.792e12,
    flops={"bf16": 0.5e15, "fp8": 1.0e15, "fp4": 2.0e15},
)
H200 = Gpu(
    name="NVIDIA H200",
    memory_bytes=139.8 * GB,
    bandwidth_bps=4.8e12,
    flops={"bf16": 0.99e15, "fp8": 1.98e15, "fp4": 1.98e15},  # Hopper has no FP4 tensor cores
    reserved_bytes=6.0 * GB,
)
GPUS = {"rtx-pro-6000": RTX_PRO_6000, "h200": H200}

# ~27B dense model of docs/field-notes.md A: 64 layers, 8 KV heads of dim 256 -> 256 KiB of FP8 KV per token.
DENSE_27B = Model(
    name="dense-27b",
    model_path="Qwen/Qwen3.8-27B",
    architecture="Qwen3ForCausalLM",
    params=27.0e9,
    weight_bytes={"fp8": 27.0 * GB, "nvfp4": 21.0 * GB, "bf16": 54.0 * GB},
    compute_format={"fp8": "fp8", "nvfp4": "fp4", "bf16": "bf16"},
    layers=64,
    kv_heads=8,
    head_dim=256,
)
MODELS = {"dense-27b": DENSE_27B}

NO_SPEC = Drafter(name="none", algorithm=None)
MTP = Drafter(
    name="mtp", algorithm="EAGLE", num_steps=3, eagle_topk=1, num_draft_tokens=4,
    accept_length={"fp8": 2.67, "nvfp4": 2.65, "bf16": 2.67},
    draft_passes=3, draft_positions=1,
    draft_pass_bytes=0.9 * GB,                # one decoder layer + shared lm head
    draft_pass_flops_per_token=2 * 0.9e9,
)
DFLASH = Drafter(
    name="dflash", algorithm="DFLASH", num_steps=1, eagle_topk=1, num_draft_tokens=8,
    accept_length={"fp8": 3.72, "nvfp4": 3.79, "bf16": 3.72},
    weight_bytes=2.0 * GB, kv_bytes_per_token=16 * 1024,
    draft_passes=1, draft_positions=8,       # block diffusion: 8 positions in one pass
    draft_pass_bytes=2.0 * GB,
    draft_pass_flops_per_token=2 * 1.0e9,
    draft_pass_overhead_s=0.0015,
    draft_model_path="z-lab/dense-27b-DFlash-b8",
)
DSPARK = Drafter(
    name="dspark", algorithm="STANDALONE", num_steps=5, eagle_topk=1, num_draft_tokens=6,
    accept_length={"fp8": 3.08, "nvfp4": 3.12, "bf16": 3.08},
    weight_bytes=2.72 * GB,                   # 1.36B params in BF16
    kv_bytes_per_token=2 * 4 * 4 * 128 * 2,   # its own BF16 KV: 4 full-attention layers, 4 heads x 128
    draft_passes=4, draft_positions=1,        # the confidence head stops after ~4 proposals on average
    draft_pass_bytes=2.72 * GB,
    draft_pass_flops_per_token=2 * 1.36e9,
    draft_model_path="dspark/dense-27b-dspark-1.4b",
)
DRAFTERS = {"none": NO_SPEC, "mtp": MTP, "dflash": DFLASH, "dspark": DSPARK}

# max_running_requests: SGLang's default is 48 with speculation; the NVFP4 arms of docs/field-notes.md A
# ran a 16-17% higher cap (56), the FP8 arms 48; without speculation SGLang sizes it from the pool.
PROFILES: dict[str, Profile] = {}


def _add(p: Profile) -> None:
    PROFILES[p.name] = p


for _fmt in ("fp8", "nvfp4"):
    for _d in (MTP, DFLASH, DSPARK, NO_SPEC):
        _name = f"{_fmt}-{'nospec' if _d is NO_SPEC else _d.name}"
        _add(Profile(
            name=_name,
            description=f"RTX PRO 6000 96GB, dense 27B {_fmt.upper()}, drafter {_d.name}"
                        + (", KV pool pinned to 175000 tokens" if _fmt == "fp8" else ", KV pool sized from memory"),
            gpu=RTX_PRO_6000, model=DENSE_27B, weight_format=_fmt, drafter=_d,
            mem_fraction_static=0.85,
            max_total_tokens=175000 if _fmt == "fp8" else None,
            max_running_requests=(48 if _fmt == "fp8" else 56) if _d is not NO_SPEC else None,
            quantization="fp8" if _fmt == "fp8" else "modelopt_fp4",
        ))
_add(Profile(
    name="h200-fp8-mtp", description="H200 141GB, dense 27B FP8, drafter mtp, KV pool sized from memory",
    gpu=H200, model=DENSE_27B, weight_format="fp8", drafter=MTP, mem_fraction_static=0.88,
    max_running_requests=48, quantization="fp8",
))
DEFAULT_PROFILE = "fp8-mtp"

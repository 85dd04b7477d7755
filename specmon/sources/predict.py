"""The knee we can predict before any load, from what the server says about itself.

Two ceilings bound how many requests can run at once:
- the KV pool, as SGLang admits: a new request needs its prompt plus a reserve for the tokens it
  has still to generate, osl x new_token_ratio (the scheduler's estimate, exported as
  sglang:new_token_ratio; 0.7 = SGLANG_INIT_NEW_TOKEN_RATIO at start and after idle, decaying
  while nothing is retracted), and every running request keeps its own reserve. A wave of equal
  requests therefore fits floor(pool / (isl + osl x ratio)) at once. Measured on a real SGLang
  0.5.10 (8,192-token pool, 1,024 in / 256 out, ratio 0.7): 6 run, the 7th queues, while
  pool / (isl + osl) would say 6.4 and pool / isl 8;
- the request cap (the effective max running requests).
The predicted knee is the lower of the two; the detail shows both pool figures and why they differ.
"""

from __future__ import annotations

import math
from typing import Optional

from specmon.model import ArmInfo, KneeCalled

INIT_NEW_TOKEN_RATIO = 0.7  # SGLang's default (SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness 1.0)


def admitted_at_once(pool: int, isl: int, osl: int, ratio: float) -> int:
    """Equal requests SGLang admits together: each needs isl + osl x ratio free tokens."""
    return int(math.floor(pool / (isl + osl * ratio) + 1e-9))


def predicted_knee(arm: str, info: ArmInfo, isl: int, osl: int,
                   new_token_ratio: Optional[float] = None) -> Optional[KneeCalled]:
    pool = info.kv_capacity_tokens
    cap = info.max_running_requests
    if pool is None and cap is None:
        return None
    per_req = isl + osl
    parts = []
    pool_bound: Optional[float] = None
    if pool and per_req > 0:
        ratio = new_token_ratio if new_token_ratio is not None and 0 < new_token_ratio <= 1 else None
        said = "new_token_ratio" if ratio is not None else "new_token_ratio assumed"
        ratio = INIT_NEW_TOKEN_RATIO if ratio is None else ratio
        pool_bound = float(admitted_at_once(pool, isl, osl, ratio))
        full = pool / per_req
        parts.append(f"KV pool {pool:,} tok / ({isl} + {osl} x {said} {ratio:.2f}) = "
                     f"{pool / (isl + osl * ratio):.1f} -> {pool_bound:.0f} admitted at once "
                     f"(SGLang reserves decode room when it admits; "
                     f"pool / ({isl}+{osl}) at full length would say {full:.1f})")
    else:
        parts.append("KV pool size unknown")
    parts.append(f"request cap {cap}" if cap is not None else "request cap unknown")
    bounds = [b for b in (pool_bound, float(cap) if cap is not None else None) if b is not None]
    knee = min(bounds)
    bound_by = "KV pool" if pool_bound is not None and knee == pool_bound else "request cap"
    detail = f"{'; '.join(parts)}; bound by the {bound_by}"
    return KneeCalled(arm=arm, definition="predicted", concurrency=round(knee, 1), detail=detail)

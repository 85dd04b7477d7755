"""The knee we can predict before any load, from what the server says about itself.

Two ceilings bound how many requests can run at once:
- the KV pool: a request holds its prompt plus everything it has generated, isl + osl tokens
  at its end, so at most pool / (isl + osl) requests fit when all are near their end;
- the request cap (the effective max running requests).
The predicted knee is the lower of the two. SGLang admits a request only when the pool can
also hold a reserve for the decode tokens still to come (the scheduler's new_token_ratio) and
keeps chunked-prefill room, so queueing in practice starts somewhat earlier than the pool
ceiling; the detail says so, with the server's current new_token_ratio when it exports one.
"""

from __future__ import annotations

from typing import Optional

from specmon.model import ArmInfo, KneeCalled


def predicted_knee(arm: str, info: ArmInfo, isl: int, osl: int,
                   new_token_ratio: Optional[float] = None) -> Optional[KneeCalled]:
    pool = info.kv_capacity_tokens
    cap = info.max_running_requests
    if pool is None and cap is None:
        return None
    per_req = isl + osl
    pool_bound = pool / per_req if pool and per_req > 0 else None
    parts = []
    if pool_bound is not None:
        parts.append(f"KV pool {pool:,} tok / ({isl}+{osl}) = {pool_bound:.1f} requests")
    else:
        parts.append("KV pool size unknown")
    parts.append(f"request cap {cap}" if cap is not None else "request cap unknown")
    bounds = [b for b in (pool_bound, float(cap) if cap is not None else None) if b is not None]
    knee = min(bounds)
    bound_by = "KV pool" if pool_bound is not None and knee == pool_bound else "request cap"
    detail = f"{'; '.join(parts)}; bound by the {bound_by}"
    if bound_by == "KV pool":
        ratio = f" (new_token_ratio now {new_token_ratio:.2f})" if new_token_ratio is not None else ""
        detail += (f"; SGLang reserves decode room when it admits requests{ratio}, "
                   f"so queueing starts earlier than {knee:.0f}")
    return KneeCalled(arm=arm, definition="predicted", concurrency=round(knee, 1), detail=detail)

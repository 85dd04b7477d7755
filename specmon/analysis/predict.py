"""The knee we can predict before any load, from what the server says about itself.

Two ceilings bound how many requests can run at once:
- the KV pool, as SGLang's PrefillAdder admits: a new request needs its prompt and all of its
  output (max_new_tokens) free, beside the room every running request keeps for the output it may
  still write: osl x new_token_ratio of it (the scheduler's estimate, exported as
  sglang:new_token_ratio), or all of it on 0.5.23 for requests that ignore EOS (they cannot end
  early; specmon's own load sets ignore_eos). The k-th of a wave of equal requests fits when
  (k - 1) x (isl + osl x ratio) + isl + osl <= pool. Measured on real servers: 0.5.10 (8,192-token
  pool, 1,024 in / 256 out, ratio 0.7) ran 6 and queued the 7th; 0.5.23 with a 1,024-token pool
  and 128 in / 48 out ran 5 (1,024 / 176 = 5.8);
- the request cap (the effective max running requests).
The predicted knee is the lower of the two; the detail shows both pool figures and why they differ.

The ratio is the server's gauge when a scrape read one. Without it (no --enable-metrics) it is the
ratio SGLang starts from, which is also where it returns whenever the server goes idle:
min(SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness, 1), the default of the server's
release (sglang_names.SCHEDULER_DEFAULTS: 0.7 in 0.5.10 and 0.5.23 alike) times the
conservativeness its /server_info reports (1.0 by default, 0.3 with DP attention). Under load
the ratio decays towards 0.14 of that start, so more requests fit than predicted, until a
retraction resets it to the running requests' own decoded share: the prediction is the server's
first, most cautious admission.
"""

from __future__ import annotations

import math
from typing import Optional

from specmon.model import ArmInfo, KneeCalled, PredictedKnee
from specmon.sources import sglang_names as names

def starting_new_token_ratio(info: ArmInfo) -> tuple[float, str]:
    """The new_token_ratio SGLang starts from (and returns to when idle) on this server, and how
    it was found (for the knee's detail)."""
    release = names.release_of(info.version)
    d = names.SCHEDULER_DEFAULTS[release]
    cons = info.schedule_conservativeness
    if cons is None or not math.isfinite(cons) or cons < 0:
        cons = d["schedule_conservativeness"]
        said_cons = f"schedule_conservativeness {cons:g} (default)"
    else:
        said_cons = f"schedule_conservativeness {cons:g}"
    init = d["init_new_token_ratio"]
    return min(init * cons, 1.0), f"SGLang {release}'s starting ratio {init:g} x {said_cons}"


def admitted_at_once(pool: int, isl: int, osl: int, ratio: float) -> int:
    """Equal requests SGLang admits together: the newest needs isl + osl free, each one before
    it keeps isl + osl x ratio (ratio 1.0: all of its output)."""
    if pool < isl + osl:
        return 0
    return 1 + int(math.floor((pool - isl - osl) / (isl + osl * ratio) + 1e-9))


def keeps_whole_output(info: ArmInfo, ignore_eos: bool) -> bool:
    """0.5.23 keeps room for all of a running request's output when it ignores EOS."""
    return ignore_eos and names.release_of(info.version) != names.RELEASES[0]


def predict_knee(info: ArmInfo, isl: int, osl: int, new_token_ratio: Optional[float] = None,
                 ignore_eos: bool = False) -> Optional[PredictedKnee]:
    """The one predicted knee (live call, session.json, replay and the knees summary all use it);
    None when neither the pool nor the cap is known. ignore_eos: the requests ignore EOS (a ramp's
    own load)."""
    pool = info.kv_capacity_tokens
    cap = info.max_running_requests
    if pool is None and cap is None:
        return None
    per_req = isl + osl
    parts = []
    k = PredictedKnee(concurrency=None, request_cap=cap, isl=isl, osl=osl)
    if pool and per_req > 0:
        k.kv_full_length = round(pool / per_req, 2)
        if keeps_whole_output(info, ignore_eos):
            # The server's ratio does not enter the figure: each running request keeps all of
            # its output, so the ratio recorded is the one used, 1.0.
            k.new_token_ratio = 1.0
            k.kv_admitted = admitted_at_once(pool, isl, osl, 1.0)
            parts.append(f"KV pool {pool:,} tok / ({isl}+{osl}) = {pool / per_req:.1f} -> {k.kv_admitted} admitted "
                         f"at once (SGLang {names.release_of(info.version)} keeps room for all of the output of "
                         f"a running request that ignores EOS, as the ramp's do)")
        else:
            ratio = new_token_ratio if new_token_ratio is not None and 0 < new_token_ratio <= 1 else None
            k.ratio_assumed = ratio is None
            said, whence = "new_token_ratio", ""
            if ratio is None:
                ratio, how = starting_new_token_ratio(info)
                said, whence = "new_token_ratio assumed", f"; the ratio assumed is {how}"
            k.new_token_ratio = ratio
            k.kv_admitted = admitted_at_once(pool, isl, osl, ratio)
            parts.append(f"KV pool {pool:,} tok / ({isl} + {osl} x {said} {ratio:.2f}) = "
                         f"{pool / (isl + osl * ratio):.1f} -> {k.kv_admitted} admitted at once "
                         f"(SGLang keeps decode room for its running requests and the whole output free "
                         f"for the next; pool / ({isl}+{osl}) at full length would say {pool / per_req:.1f}){whence}")
    else:
        parts.append("KV pool size unknown")
    parts.append(f"request cap {cap}" if cap is not None else "request cap unknown")
    bounds = [float(b) for b in (k.kv_admitted, cap) if b is not None]
    knee = min(bounds)
    k.bound_by = "KV pool" if k.kv_admitted is not None and knee == k.kv_admitted else "request cap"
    k.concurrency = round(knee, 1)
    k.detail = f"{'; '.join(parts)}; bound by the {k.bound_by}"
    return k


def predicted_knee_event(arm: str, k: PredictedKnee) -> KneeCalled:
    return KneeCalled(arm=arm, definition="predicted", concurrency=k.concurrency, detail=k.detail, predicted=k)

"""A generation request on its way through the scheduler: the SimRequest made from a parsed
body, and the wait for the scheduler's flushes of it (shared by /generate and the OpenAI API)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Optional

from specmon.servers.sim.engine import SimRequest
from specmon.servers.sim.stablehash import stable_hash

if TYPE_CHECKING:
    from specmon.servers.sim.app import SimState

DEFAULT_MAX_NEW_TOKENS = 128


def make_request(st: SimState, prompt, sampling: dict, rid: Optional[str], log_metrics: bool = True) -> SimRequest:
    # The prompt as the tokens the prefix cache matches: input_ids as sent, text as the
    # model's tokenizer splits it (or the simulator's stand-in tokens, see tokens.py).
    key = tuple(prompt) if isinstance(prompt, list) else st.tokens.key(prompt)
    prompt_len = len(key)
    max_new = sampling.get("max_new_tokens")
    max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else int(max_new)
    ignore_eos = bool(sampling.get("ignore_eos", False))
    si = sampling.get("stream_interval")  # SGLang's per-request override of --stream-interval
    si = si if isinstance(si, int) and not isinstance(si, bool) and si >= 1 else None
    # A uuid4-shaped id as SGLang makes, drawn from --seed: the n-th request of a run gets the
    # same id, hence the same answer, every time.
    rid = rid or uuid.UUID(int=st.rid_rng.getrandbits(128), version=4).hex
    seed = stable_hash(st.seed, "request", rid)
    if ignore_eos or max_new <= 1:
        target, by_eos = max(1, max_new), False
    else:
        # The "model" ends its answer after a length drawn per request (from --seed and the rid).
        natural = 16 + stable_hash(st.seed, "eos", rid) % 600
        target, by_eos = (natural, True) if natural < max_new else (max_new, False)
    return SimRequest(rid=rid, prompt_len=prompt_len, max_new_tokens=max(1, max_new), target_len=target,
                      stop_by_eos=by_eos, t_created=st.clock.now(), log_metrics=log_metrics,
                      prefix_key=key, seed=seed, stream_interval=si, ignore_eos=ignore_eos)


async def wait_updates(r: SimRequest):
    """Yields (tokens_so_far, finished, error) each time the scheduler flushes this request."""
    n = 0
    while True:
        await r.event.wait()
        r.event.clear()
        ups, r.pending = r.pending, []
        fin, err = False, None
        for u in ups:
            n += u.new_tokens
            fin = fin or u.finished
            err = err or u.error
        if ups:
            yield n, fin, err
        if fin or err:
            return

"""`--dp-size N`: N scheduler replicas behind one HTTP server, as SGLang runs N schedulers (one
per DP rank, each with its own KV pool and running batch) behind one tokenizer manager.

A request goes to the rank it names (`routed_dp_rank`, or the deprecated `data_parallel_rank`,
both honoured by SGLang's DP controller), else round robin (SGLang's default load balancing for
a server that is not a PD prefill). The HTTP side
reads the server as a whole through this class (sums of the ranks) and each rank through
`ranks` (/v1/loads, /get_load and /server_info list one entry per rank).
"""

from __future__ import annotations

from typing import Optional

from specmon.servers.sim.engine import Scheduler, SimRequest


def routed_rank(body: dict) -> Optional[int]:
    """The DP rank a request body names (routed_dp_rank, else data_parallel_rank), or None."""
    for key in ("routed_dp_rank", "data_parallel_rank"):
        v = body.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


class DPScheduler:
    def __init__(self, ranks: list[Scheduler]):
        self.ranks = list(ranks)
        self._next = 0
        # One list for every rank: a fault switch sees each finished request whichever rank ran it.
        self.on_finished_callbacks: list = []
        for s in self.ranks:
            s.on_finished_callbacks = self.on_finished_callbacks

    # -- routing ---------------------------------------------------------------------------------
    def submit(self, r: SimRequest, dp_rank: Optional[int] = None) -> None:
        if dp_rank is not None and 0 <= dp_rank < len(self.ranks):
            k = dp_rank
        else:
            k = self._next
            self._next = (self._next + 1) % len(self.ranks)
        r.dp_rank = k  # read by the request's meta_info and by abort
        self.ranks[k].submit(r)

    def _rank_of(self, r: SimRequest) -> Scheduler:
        k = getattr(r, "dp_rank", None)
        return self.ranks[k] if isinstance(k, int) and 0 <= k < len(self.ranks) else self.ranks[0]

    def abort(self, r: SimRequest) -> None:
        self._rank_of(r).abort(r)

    # -- the server as a whole ---------------------------------------------------------------------
    @property
    def running(self) -> list:
        return [r for s in self.ranks for r in s.running]

    @property
    def waiting(self) -> list:
        return [r for s in self.ranks for r in s.waiting]

    @property
    def num_used_tokens(self) -> int:
        return sum(s.num_used_tokens for s in self.ranks)

    @property
    def max_total_tokens(self) -> int:
        return sum(s.max_total_tokens for s in self.ranks)

    @property
    def token_usage(self) -> float:
        total = self.max_total_tokens
        return self.num_used_tokens / total if total else 0.0

    @property
    def max_running_requests(self) -> int:
        return self.ranks[0].max_running_requests  # per rank, as SGLang reports it

    @property
    def decode_log_interval(self) -> int:
        return self.ranks[0].decode_log_interval

    @property
    def decode_steps(self) -> int:
        return sum(s.decode_steps for s in self.ranks)

    @property
    def last_gen_throughput(self) -> float:
        return sum(s.last_gen_throughput for s in self.ranks)

    @property
    def last_cache_hit_rate(self) -> float:
        return sum(s.last_cache_hit_rate for s in self.ranks) / len(self.ranks)

    @property
    def last_spec_accept_rate(self) -> float:
        return sum(s.last_spec_accept_rate for s in self.ranks) / len(self.ranks)

    @property
    def lifetime_accept_length(self) -> Optional[float]:
        verify = sum(s.lifetime_verify for s in self.ranks)
        if not self.ranks[0].spec or verify == 0:
            return None
        return sum(s.lifetime_spec_tokens for s in self.ranks) / verify

    @property
    def lifetime_verify(self) -> int:
        return sum(s.lifetime_verify for s in self.ranks)

    @lifetime_verify.setter
    def lifetime_verify(self, v: int) -> None:
        for s in self.ranks:
            s.lifetime_verify = v

    @property
    def lifetime_spec_tokens(self) -> int:
        return sum(s.lifetime_spec_tokens for s in self.ranks)

    @lifetime_spec_tokens.setter
    def lifetime_spec_tokens(self, v: int) -> None:
        for s in self.ranks:
            s.lifetime_spec_tokens = v

    @property
    def stalled_until_wall(self) -> float:
        return max(s.stalled_until_wall for s in self.ranks)

    @stalled_until_wall.setter
    def stalled_until_wall(self, v: float) -> None:
        for s in self.ranks:
            s.stalled_until_wall = v

    def is_idle(self) -> bool:
        return all(s.is_idle() for s in self.ranks)

    def flush_prefix_cache(self) -> None:
        for s in self.ranks:
            s.flush_prefix_cache()

    def start(self) -> None:
        for s in self.ranks:
            s.start()

    async def stop(self) -> None:
        for s in self.ranks:
            await s.stop()

    def _flush(self) -> None:
        for s in self.ranks:
            s._flush()

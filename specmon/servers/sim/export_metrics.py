"""`--export-metrics-to-file --export-metrics-to-file-dir DIR`: one JSON line per finished request,
as SGLang 0.5.23 writes them (srt/observability/request_metrics_exporter.py).

The file is `DIR/sglang-request-metrics-YYYYMMDD_HH.log` for the hour (local time) the line is
written in, so it rotates on the hour as SGLang's does; each line is the request's final
meta_info plus `request_parameters` (the request's own fields as a JSON string) and is written
and flushed in one call. The warm-up request is written too (SGLang logs its own); health
checks are not (the simulator's never reach the scheduler).

Unlike the meta_info this simulator sends when it speaks 0.5.10, these lines carry the
scheduler's own figures, as 0.5.23's do: `queue_time` is the request's real wait (admission
minus arrival) and `first_token_latency` its TTFT, both in simulated seconds; stamps are the
simulated clock's epoch.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Optional, TextIO


class RequestMetricsFile:
    def __init__(self, directory: str, clock: Any, *, speculative: bool = False, draft_tokens: int = 0):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)  # as SGLang: the folder is made when missing
        self.clock = clock
        self.speculative = speculative
        self.draft_tokens = draft_tokens
        self._hour: Optional[str] = None
        self._f: Optional[TextIO] = None

    def _file(self) -> TextIO:
        hour = time.strftime("%Y%m%d_%H", time.localtime())
        if hour != self._hour or self._f is None:
            if self._f is not None:
                self._f.close()
            self._f = open(os.path.join(self.dir, f"sglang-request-metrics-{hour}.log"), "a", encoding="utf-8")
            self._hour = hour
        return self._f

    def record(self, r: Any) -> dict:
        """The line of a finished SimRequest (engine.py), as a dict."""
        epoch = self.clock.epoch
        t_fin = r.t_finished if r.t_finished is not None else r.t_created
        n = r.output_len
        m: dict[str, Any] = {
            "request_parameters": json.dumps({"rid": r.rid, "sampling_params": {"max_new_tokens": r.max_new_tokens},
                                              "stream": bool(getattr(r, "stream", True))}),
            "id": r.rid,
            "finish_reason": ({"type": "abort"} if r.aborted else
                              {"type": "length", "length": n} if not r.stop_by_eos or n < r.target_len else
                              {"type": "stop", "matched": 2}),
            "prompt_tokens": r.prompt_len,
            "weight_version": "default",
            "num_retractions": r.retractions,
            "queue_time": (r.t_forward_entry - r.t_created) if r.t_forward_entry is not None else None,
            "reasoning_tokens": 0,
            "completion_tokens": n,
            "cached_tokens": r.cached_tokens,
            "cached_tokens_details": {"device": r.cached_tokens, "host": 0} if r.cached_tokens else None,
            "dp_rank": getattr(r, "dp_rank", None),
            "e2e_latency": t_fin - r.t_created,
            "request_received_ts": epoch(r.t_created),
            "first_token_latency": (r.t_first_token - r.t_created) if r.t_first_token is not None else None,
            "request_finished_ts": epoch(t_fin),
        }
        if r.t_forward_entry is not None:
            m["forward_entry_time"] = epoch(r.t_forward_entry)
        if r.t_first_token is not None:
            m["response_sent_to_client_ts"] = epoch(r.t_first_token)
            if t_fin > r.t_first_token and n > 0:
                m["decode_throughput"] = n / (t_fin - r.t_first_token)
        if self.speculative and r.verify_ct > 0:
            proposed = r.verify_ct * max(self.draft_tokens - 1, 0)
            m["spec_verify_ct"] = r.verify_ct
            m["spec_accept_length"] = n / r.verify_ct
            m["spec_num_correct_drafts"] = r.accepted_drafts
            m["spec_num_proposed_drafts"] = proposed
            if proposed:
                m["spec_accept_rate"] = r.accepted_drafts / proposed
        return m

    def write(self, r: Any) -> None:
        """Append request r's line (one write, flushed: a reader never sees half of it but the last)."""
        try:
            f = self._file()
            f.write(json.dumps(self.record(r)) + "\n")
            f.flush()
        except OSError:
            pass  # as SGLang: a failed export is logged there, never the request's failure

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def install(st: Any, directory: Optional[str]) -> Optional[RequestMetricsFile]:
    """Hook the writer to the scheduler's finished requests (None without a folder)."""
    if not directory:
        return None
    w = RequestMetricsFile(directory, st.clock, speculative=st.spec, draft_tokens=st.num_draft_tokens)
    st.sched.on_finished_callbacks.append(w.write)
    return w
